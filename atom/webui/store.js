// Conversations, kept in this browser's localStorage: one owner (this module) for
// the list, the current one, and their export and import as JSON.

const KEY = "atom.conversations";
const CURRENT = "atom.current";
export const DEFAULT_SETTINGS = {
  model: "", system: "", temperature: 0.7, top_p: 1, max_tokens: 512, seed: null,
};

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(saved) ? saved : [];
  } catch (_) {
    return [];
  }
}

let conversations = load();

export function save() {
  localStorage.setItem(KEY, JSON.stringify(conversations));
}

export function all() {
  return conversations;
}

export function create() {
  const conversation = {
    id: crypto.randomUUID ? crypto.randomUUID() : String(Date.now() + Math.random()),
    title: "New chat",
    created: Date.now(),
    settings: { ...DEFAULT_SETTINGS, ...(current() ? { model: current().settings.model } : {}) },
    messages: [],
  };
  conversations.unshift(conversation);
  select(conversation.id);
  save();
  return conversation;
}

export function current() {
  const id = localStorage.getItem(CURRENT);
  return conversations.find((c) => c.id === id) || conversations[0] || null;
}

export function select(id) {
  localStorage.setItem(CURRENT, id);
}

export function remove(id) {
  conversations = conversations.filter((c) => c.id !== id);
  save();
}

export function exportJson() {
  return JSON.stringify({ atom_conversations: 1, conversations }, null, 2);
}

// Conversations from an export (merged: one with the same id is replaced). Returns how
// many were taken; throws on a file that is not an export.
export function importJson(text) {
  const data = JSON.parse(text);
  const taken = Array.isArray(data) ? data : data.conversations;
  if (!Array.isArray(taken)) throw new Error("not an ATOM conversations export");
  const valid = taken.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages));
  for (const conversation of valid) {
    conversation.settings = { ...DEFAULT_SETTINGS, ...(conversation.settings || {}) };
    conversations = conversations.filter((c) => c.id !== conversation.id);
    conversations.unshift(conversation);
  }
  if (valid.length) select(valid[0].id);
  save();
  return valid.length;
}
