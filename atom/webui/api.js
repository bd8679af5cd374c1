// The page is a client of the server's own API. Every call goes through here: the API
// key (entered once, kept in this browser), errors turned into readable messages.

const KEY = "atom.apiKey";

export function apiKey() {
  return localStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

// An error the page shows as a message: `status` is the HTTP status (0: no answer).
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(json) {
  const sent = {};
  if (json) sent["Content-Type"] = "application/json";
  if (apiKey()) sent["Authorization"] = `Bearer ${apiKey()}`;
  return sent;
}

async function failure(response) {
  let text = await response.text();
  try {
    const body = JSON.parse(text);
    text = (body.error && (body.error.message || body.error)) || text;
  } catch (_) {
    // not JSON: show the text as it came
  }
  const hint = response.status === 401 ? " (enter the server's API key with Key)" : "";
  return new ApiError(response.status, `Error ${response.status}: ${text}${hint}`);
}

async function send(path, options) {
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "The connection to the server was lost.");
  }
  if (!response.ok) throw await failure(response);
  return response;
}

export async function getJson(path) {
  const response = await send(path, { headers: headers(false) });
  return response.json();
}

// The server's models (/v1/models' data), asked once for the page: the chat view and
// the speech controls both read them.
let models = null;
export function listModels() {
  models ??= getJson("/v1/models").then((body) => body.data);
  return models;
}

// The text of an audio file (a File or a Blob), by the server's speech model.
export async function transcribe(model, audio, name) {
  const form = new FormData();
  form.append("file", audio, name);
  form.append("model", model);
  const response = await send("/v1/audio/transcriptions", {
    method: "POST",
    headers: headers(false),
    body: form,
  });
  return (await response.json()).text;
}

// POST a streaming chat completion; `onChunk` gets each parsed chunk. Resolves when the
// stream ends (`[DONE]`); rejects with ApiError (or AbortError when `signal` stops it).
export async function streamChat(body, signal, onChunk) {
  const options = { method: "POST", headers: headers(true), body: JSON.stringify(body), signal };
  const response = await send("/v1/chat/completions", options);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let done = false;
  try {
    while (!done) {
      const { value, done: ended } = await reader.read();
      if (ended) break;
      buffered += decoder.decode(value, { stream: true });
      const events = buffered.split("\n\n");
      buffered = events.pop();
      for (const event of events) done = handleEvent(event, onChunk) || done;
    }
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "The connection to the server was lost mid-answer.");
  }
  if (!done) throw new ApiError(0, "The stream ended before the answer was complete.");
}

// One server-sent event: true at `[DONE]`. An error event mid-stream is thrown.
function handleEvent(event, onChunk) {
  const data = event
    .split("\n")
    .filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(5).trimStart())
    .join("\n");
  if (!data) return false; // a keep-alive comment
  if (data === "[DONE]") return true;
  const chunk = JSON.parse(data);
  if (chunk.error) throw new ApiError(chunk.error.code || 500, chunk.error.message);
  onChunk(chunk);
  return false;
}
