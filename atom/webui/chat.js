// The chat view: conversations (store.js), sending and streaming answers, Stop,
// regenerate, edit-and-resend, settings per conversation.

import { ApiError, getJson, listModels, streamChat } from "./api.js";
import { Answer } from "./answer.js";
import { fillMessage, messageElement } from "./messages.js";
import * as store from "./store.js";

const $ = (id) => document.getElementById(id);
const SETTINGS = ["system", "temperature", "top_p", "max_tokens", "seed"];
let streaming = null; // { controller, answer, item, model } while an answer streams
let showNotice = () => {};

export function initChat(notice) {
  showNotice = notice;
  if (!store.current()) store.create();
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && streaming) stop();
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => {
    store.create();
    draw();
  });
  $("export-chats").addEventListener("click", exportChats);
  $("import-chats").addEventListener("change", importChats);
  $("model").addEventListener("change", () => keepSetting("model", $("model").value));
  for (const name of SETTINGS) {
    $(name).addEventListener("change", () => keepSetting(name, settingValue(name)));
  }
  draw();
  loadModels();
}

async function loadModels() {
  try {
    const models = (await listModels()).filter((m) => m.kind === "generate");
    $("model").replaceChildren(...models.map((m) => new Option(m.id, m.id)));
    const settings = store.current().settings;
    if (!models.some((m) => m.id === settings.model) && models.length) {
      keepSetting("model", models[0].id);
    }
    $("model").value = store.current().settings.model;
  } catch (error) {
    showNotice(`Could not list the models: ${error.message}`);
  }
}

function settingValue(name) {
  const raw = $(name).value;
  if (name === "system") return raw;
  return raw === "" ? null : Number(raw);
}

function keepSetting(name, value) {
  store.current().settings[name] = value;
  store.save();
}

// Redraw the conversation list, the settings and the messages of the current one.
function draw() {
  const conversation = store.current();
  $("conversations").replaceChildren(...store.all().map((c) => conversationItem(c, conversation)));
  for (const name of SETTINGS) $(name).value = conversation.settings[name] ?? "";
  if ($("model").options.length) $("model").value = conversation.settings.model;
  const last = conversation.messages.length - 1;
  $("messages").replaceChildren(
    ...conversation.messages.map((message, index) =>
      messageElement(message, actionsFor(message, index, index === last)),
    ),
  );
  scrollDown();
}

function conversationItem(conversation, selected) {
  const item = document.createElement("li");
  item.classList.toggle("active", conversation === selected);
  const title = document.createElement("span");
  title.textContent = conversation.title;
  const remove = document.createElement("button");
  remove.type = "button";
  remove.textContent = "×";
  remove.title = "Delete";
  remove.addEventListener("click", (event) => {
    event.stopPropagation();
    store.remove(conversation.id);
    if (!store.current()) store.create();
    draw();
  });
  item.append(title, remove);
  item.addEventListener("click", () => {
    if (streaming) return;
    store.select(conversation.id);
    draw();
  });
  return item;
}

function actionsFor(message, index, isLast) {
  if (streaming) return [];
  if (message.role === "user") return [["Edit", () => edit(index)]];
  return isLast ? [["Regenerate", regenerate]] : [];
}

function send() {
  const text = $("prompt").value;
  if (streaming || !text.trim()) return;
  const conversation = store.current();
  if (!conversation.messages.length) conversation.title = text.trim().slice(0, 40);
  conversation.messages.push({ role: "user", content: text });
  $("prompt").value = "";
  answer(conversation);
}

function edit(index) {
  const conversation = store.current();
  $("prompt").value = conversation.messages[index].content;
  conversation.messages.splice(index);
  store.save();
  draw();
  $("prompt").focus();
}

function regenerate() {
  const conversation = store.current();
  while (conversation.messages.length && conversation.messages.at(-1).role !== "user") {
    conversation.messages.pop();
  }
  if (conversation.messages.length) answer(conversation);
}

function requestBody(conversation) {
  const s = conversation.settings;
  const history = conversation.messages
    .filter((m) => m.role === "user" || m.role === "assistant")
    .map((m) => ({ role: m.role, content: m.content || "" }));
  const messages = s.system ? [{ role: "system", content: s.system }, ...history] : history;
  const body = { model: s.model, messages, stream: true, stream_options: { include_usage: true } };
  for (const name of ["temperature", "top_p", "max_tokens", "seed"]) {
    if (s[name] !== null && s[name] !== "" && s[name] !== undefined) body[name] = s[name];
  }
  return body;
}

async function answer(conversation) {
  store.save();
  const body = requestBody(conversation);
  const current = new Answer();
  streaming = { controller: new AbortController(), answer: current, model: body.model };
  draw();
  streaming.item = messageElement(current.message, []);
  $("messages").append(streaming.item);
  setStreaming(true);
  let redraw = 0;
  try {
    await streamChat(body, streaming.controller.signal, (chunk) => {
      current.apply(chunk);
      redraw ||= requestAnimationFrame(() => {
        redraw = 0;
        if (streaming) fillMessage(streaming.item, current.message);
        scrollDown();
      });
    });
    conversation.messages.push(current.finish());
  } catch (error) {
    conversation.messages.push(...ended(current, error));
  } finally {
    const stopped = streaming.stoppedWith;
    streaming = null;
    setStreaming(false);
    store.save();
    draw();
    if (stopped !== undefined) watchFreed(conversation, body.model, stopped);
  }
}

// The messages an answer that did not finish leaves: what had come, and why it ended.
function ended(current, error) {
  if (error.name === "AbortError") {
    const kept = { ...current.message, note: "Stopped. Waiting for the server to free it…" };
    return [kept];
  }
  const partial = current.message.content || current.message.reasoning ? [current.message] : [];
  const text = error instanceof ApiError ? error.message : `Error: ${error.message}`;
  return [...partial, { role: "error", content: text }];
}

async function stop() {
  if (!streaming) return;
  let running = null;
  try {
    running = (await getJson("/webui/api/engine")).models[streaming.model].num_requests_running;
  } catch (_) {
    // the engine feed is only for the note below
  }
  if (!streaming) return;
  streaming.stoppedWith = running;
  streaming.controller.abort();
}

// After Stop: say when the server has let go of the request (its running count fell).
async function watchFreed(conversation, model, runningAtStop) {
  const message = conversation.messages.at(-1);
  const deadline = performance.now() + 10000;
  while (performance.now() < deadline) {
    try {
      const running = (await getJson("/webui/api/engine")).models[model].num_requests_running;
      if (runningAtStop === null || running < runningAtStop || running === 0) {
        message.note = `Stopped; the server freed the request (running now: ${running}).`;
        store.save();
        draw();
        return;
      }
    } catch (_) {
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  message.note = "Stopped.";
  store.save();
  draw();
}

function setStreaming(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
}

function scrollDown() {
  const list = $("messages");
  list.scrollTop = list.scrollHeight;
}

function exportChats() {
  const blob = new Blob([store.exportJson()], { type: "application/json" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = "atom-conversations.json";
  link.click();
  URL.revokeObjectURL(link.href);
}

async function importChats(event) {
  const [file] = event.target.files;
  event.target.value = "";
  if (!file) return;
  try {
    const taken = store.importJson(await file.text());
    showNotice(`Imported ${taken} conversation${taken === 1 ? "" : "s"}.`, "info");
  } catch (error) {
    showNotice(`Could not import ${file.name}: ${error.message}`);
  }
  draw();
}
