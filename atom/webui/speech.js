// Speech into the prompt box: an audio file, or the microphone recorded in the browser,
// sent to /v1/audio/transcriptions; the text is added where the prompt ends. The
// controls show only when the server serves a speech model (kind "transcribe").

import { listModels, transcribe } from "./api.js";

const $ = (id) => document.getElementById(id);
let model = null; // the speech model's name, once listed
let recorder = null; // the MediaRecorder while the microphone records
let showNotice = () => {};

export async function initSpeech(notice) {
  showNotice = notice;
  try {
    const speech = (await listModels()).find((m) => m.kind === "transcribe");
    model = speech ? speech.id : null;
  } catch (_) {
    model = null; // the chat view reports a server it cannot list
  }
  $("speech").hidden = !model;
  $("record").hidden = !model || !navigator.mediaDevices?.getUserMedia;
  $("audio-file").addEventListener("change", () => {
    const [file] = $("audio-file").files;
    $("audio-file").value = "";
    if (file) fill(file, file.name);
  });
  $("record").addEventListener("click", () => (recorder ? recorder.stop() : record()));
}

async function record() {
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (error) {
    showNotice(`The microphone is not available: ${error.message}`);
    return;
  }
  const chunks = [];
  recorder = new MediaRecorder(stream);
  recorder.addEventListener("dataavailable", (event) => chunks.push(event.data));
  recorder.addEventListener("stop", () => {
    for (const track of stream.getTracks()) track.stop();
    recorder = null;
    setRecording(false);
    fill(new Blob(chunks, { type: chunks[0]?.type || "audio/webm" }), "recording.webm");
  });
  recorder.start();
  setRecording(true);
}

function setRecording(on) {
  $("record").textContent = on ? "Stop recording" : "Record";
  $("record").classList.toggle("recording", on);
}

// Transcribe `audio` and add its text to the prompt.
async function fill(audio, name) {
  const prompt = $("prompt");
  prompt.disabled = true;
  $("speech").classList.add("busy");
  try {
    const text = (await transcribe(model, audio, name)).trim();
    if (text) prompt.value = prompt.value ? `${prompt.value.trimEnd()} ${text}` : text;
  } catch (error) {
    showNotice(error.message);
  } finally {
    prompt.disabled = false;
    $("speech").classList.remove("busy");
    prompt.focus();
  }
}
