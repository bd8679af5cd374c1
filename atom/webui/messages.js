// One chat message as a list item: a user's text, an answer (reasoning, markdown,
// tool calls, its numbers) or an error. Model output only ever reaches the page
// through renderMarkdown (sanitized) or textContent.

import { renderMarkdown } from "./render.js";

export function messageElement(message, actions) {
  const item = document.createElement("li");
  item.className = `message ${message.role}`;
  fillMessage(item, message);
  if (actions.length) {
    const row = document.createElement("div");
    row.className = "actions";
    for (const [label, onClick] of actions) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.dataset.action = label.toLowerCase();
      button.addEventListener("click", onClick);
      row.append(button);
    }
    item.append(row);
  }
  return item;
}

// (Re)draw a message's content into `item` (an answer is redrawn as it streams).
export function fillMessage(item, message) {
  item.querySelectorAll(":scope > :not(.actions)").forEach((child) => child.remove());
  const parts = [];
  if (message.role === "user" || message.role === "error") {
    const text = document.createElement("div");
    text.className = "text";
    text.textContent = message.content;
    parts.push(text);
  } else {
    if (message.reasoning) parts.push(reasoningElement(message));
    const body = document.createElement("div");
    body.className = "markdown";
    renderMarkdown(body, message.content || "");
    parts.push(body);
    for (const call of message.tool_calls || []) parts.push(toolCallElement(call));
  }
  for (const [name, text] of [["stats", statsText(message.stats)], ["note", message.note]]) {
    if (!text) continue;
    const line = document.createElement("div");
    line.className = name;
    line.textContent = text;
    parts.push(line);
  }
  item.prepend(...parts);
}

function reasoningElement(message) {
  const details = document.createElement("details");
  details.className = "reasoning";
  details.open = !message.content; // open while only the reasoning has come
  const summary = document.createElement("summary");
  summary.textContent = message.content ? "Reasoning" : "Reasoning…";
  const text = document.createElement("div");
  text.textContent = message.reasoning;
  details.append(summary, text);
  return details;
}

function toolCallElement(call) {
  const block = document.createElement("div");
  block.className = "tool-call";
  const name = document.createElement("strong");
  name.textContent = `Tool call: ${call.name || "?"}`;
  const args = document.createElement("pre");
  args.textContent = call.arguments || "";
  block.append(name, args);
  return block;
}

function statsText(stats) {
  if (!stats) return "";
  const parts = [`${stats.tokens} tokens`];
  if (stats.ttft_s != null) parts.push(`TTFT ${stats.ttft_s.toFixed(2)} s`);
  if (stats.tokens_per_s != null) parts.push(`${stats.tokens_per_s.toFixed(1)} tokens/s`);
  return parts.join(" · ");
}
