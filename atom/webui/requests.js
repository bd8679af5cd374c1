// The request view (needs --request-log): the last requests, and one request's event
// stream as a timeline, the body its client sent and the bytes it was sent back.

import { getJson } from "./api.js";

const $ = (id) => document.getElementById(id);
const ENVELOPE = new Set(["v", "seq", "at", "type", "request_id"]);
let showNotice = () => {};

export function initRequests(notice) {
  showNotice = notice;
  $("refresh-requests").addEventListener("click", refresh);
}

export async function refresh() {
  let listing;
  try {
    listing = await getJson("/webui/api/requests");
  } catch (error) {
    showNotice(`The request list failed: ${error.message}`);
    return;
  }
  if (!listing.request_log) {
    $("request-list").replaceChildren();
    hint("The server runs without --request-log: there are no events to show.");
    return;
  }
  $("request-list").replaceChildren(...listing.data.map(requestItem));
  if (!listing.data.length) hint("No requests yet.");
}

function hint(text) {
  const line = document.createElement("p");
  line.className = "hint";
  line.textContent = text;
  $("request-detail").replaceChildren(line);
}

function requestItem(summary) {
  const item = document.createElement("li");
  item.dataset.id = summary.id;
  const id = document.createElement("span");
  id.textContent = summary.id;
  const state = document.createElement("span");
  state.className = "state";
  const when = new Date(summary.received_at * 1000).toLocaleTimeString();
  state.textContent = `${when} · ${summary.endpoint} · ${summary.state} · ${summary.num_events} events`;
  item.append(id, state);
  item.addEventListener("click", () => show(summary.id));
  return item;
}

async function show(id) {
  let details;
  try {
    details = await getJson(`/webui/api/requests/${encodeURIComponent(id)}`);
  } catch (error) {
    showNotice(`Request ${id}: ${error.message}`);
    return;
  }
  for (const item of $("request-list").children) {
    item.classList.toggle("active", item.dataset.id === id);
  }
  const title = document.createElement("h2");
  title.textContent = `${details.id} (${details.model}, ${details.state})`;
  const received = details.events.find((e) => e.type === "request_received");
  $("request-detail").replaceChildren(
    title,
    heading("Events"),
    timeline(details.events, details.num_dropped),
    heading("Body it was sent"),
    preformatted(received ? JSON.stringify(received.body, null, 2) : "(not recorded)"),
    heading(`Bytes sent back (HTTP ${details.response.status ?? "–"}, rebuilt from the events)`),
    preformatted(details.response.body),
  );
}

function heading(text) {
  const h = document.createElement("h3");
  h.textContent = text;
  return h;
}

function preformatted(text) {
  const pre = document.createElement("pre");
  pre.textContent = text;
  return pre;
}

function timeline(events, numDropped) {
  const list = document.createElement("ol");
  list.className = "timeline";
  const start = events.length ? events[0].at : 0;
  for (const event of events) {
    const item = document.createElement("li");
    item.dataset.type = event.type;
    const cells = [
      ["at", `+${((event.at - start) * 1000).toFixed(1)} ms`],
      ["type", event.type],
      ["detail", describe(event)],
    ];
    for (const [name, text] of cells) {
      const cell = document.createElement("span");
      cell.className = name;
      cell.textContent = text;
      item.append(cell);
    }
    list.append(item);
  }
  if (numDropped) {
    const item = document.createElement("li");
    item.textContent = `… and ${numDropped} later events not kept in memory`;
    list.append(item);
  }
  return list;
}

// An event's own fields in a line, but empty ones (null, []); the request body is
// shown on its own below.
function describe(event) {
  const fields = Object.entries(event).filter(([key, value]) => {
    if (ENVELOPE.has(key) || value === null) return false;
    if (Array.isArray(value) && !value.length) return false;
    return event.type !== "request_received" || key === "endpoint" || key === "model";
  });
  return fields.map(([key, value]) => `${key}=${shortened(value)}`).join(" ");
}

// A long list (a prompt's token ids) as its first items and its length.
function shortened(value) {
  if (Array.isArray(value) && value.length > 24) {
    return `${JSON.stringify(value.slice(0, 24)).slice(0, -1)},… (${value.length} in all)]`;
  }
  return JSON.stringify(value);
}
