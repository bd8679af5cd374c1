// The engine view: every second, /webui/api/engine (each model's gauges and counters,
// the fold behind /metrics); counters become rates between two readings.

import { getJson } from "./api.js";

const POINTS = 120; // two minutes of history
const $ = (id) => document.getElementById(id);

// What each chart shows, from the reading now and the one before (null: no value yet).
const SERIES = [
  ["running", "Running requests", (now) => now.num_requests_running, (v) => v.toFixed(0)],
  ["waiting", "Waiting requests", (now) => now.num_requests_waiting, (v) => v.toFixed(0)],
  ["kv", "KV cache in use", (now) => 100 * now.kv_cache_usage_perc, (v) => `${v.toFixed(1)} %`],
  ["hits", "Prefix-cache hit rate", (now, before) => ratio(now, before,
    "prefix_cache_hits_total", "prefix_cache_queries_total", 100), (v) => `${v.toFixed(0)} %`],
  ["tps", "Output tokens/s", (now, before, seconds) =>
    (now.generation_tokens_total - before.generation_tokens_total) / seconds,
    (v) => v.toFixed(1)],
  ["ttft", "Time to first token", (now, before) => ratio(now, before,
    "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count", 1),
    (v) => `${v.toFixed(2)} s`],
];

function ratio(now, before, part, whole, scale) {
  const n = now[whole] - before[whole];
  return n > 0 ? (scale * (now[part] - before[part])) / n : null;
}

const history = new Map(); // model -> { before, at, series: {key: [values]} }
let timer = null;
let showNotice = () => {};

export function initEngine(notice) {
  showNotice = notice;
}

export function showEngine(visible) {
  clearInterval(timer);
  timer = null;
  if (!visible) return;
  poll();
  timer = setInterval(poll, 1000);
}

async function poll() {
  let feed;
  try {
    feed = await getJson("/webui/api/engine");
  } catch (error) {
    showNotice(`The engine feed failed: ${error.message}`);
    return;
  }
  for (const [model, now] of Object.entries(feed.models)) record(model, now, feed.at);
  draw();
}

function record(model, now, at) {
  const seen = history.get(model) || { before: null, at: 0, series: {} };
  const seconds = seen.before ? at - seen.at : 0;
  for (const [key, , value] of SERIES) {
    const values = (seen.series[key] ||= []);
    const ready = seen.before && seconds > 0;
    values.push(ready || key === "running" || key === "waiting" || key === "kv"
      ? value(now, seen.before, seconds) : null);
    if (values.length > POINTS) values.shift();
  }
  history.set(model, { before: now, at, series: seen.series });
}

function draw() {
  const root = $("engine-models");
  for (const [model, seen] of history) {
    let section = root.querySelector(`section[data-model="${CSS.escape(model)}"]`);
    if (!section) section = root.appendChild(modelSection(model));
    for (const [key, , , format] of SERIES) {
      const chart = section.querySelector(`[data-series="${key}"]`);
      const values = seen.series[key];
      const last = values.at(-1);
      chart.querySelector(".value").textContent = last === null ? "–" : format(last);
      plot(chart.querySelector("canvas"), values);
    }
  }
}

function modelSection(model) {
  const section = document.createElement("section");
  section.className = "engine-model";
  section.dataset.model = model;
  const title = document.createElement("h2");
  title.textContent = model;
  const charts = document.createElement("div");
  charts.className = "charts";
  for (const [key, label] of SERIES) {
    const chart = document.createElement("div");
    chart.className = "chart";
    chart.dataset.series = key;
    const head = document.createElement("div");
    head.className = "label";
    const name = document.createElement("span");
    name.textContent = label;
    const value = document.createElement("span");
    value.className = "value";
    head.append(name, value);
    chart.append(head, document.createElement("canvas"));
    charts.append(chart);
  }
  section.append(title, charts);
  return section;
}

// A line over the last POINTS readings, scaled to its own maximum (gaps where null).
function plot(canvas, values) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth * ratio;
  const height = canvas.clientHeight * ratio;
  if (!width || !height) return;
  canvas.width = width;
  canvas.height = height;
  const context = canvas.getContext("2d");
  const colour = getComputedStyle(document.documentElement).getPropertyValue("--accent");
  const top = Math.max(1e-9, ...values.filter((v) => v !== null));
  context.strokeStyle = colour.trim() || "#2458d6";
  context.lineWidth = 2 * ratio;
  context.beginPath();
  let drawing = false;
  values.forEach((v, i) => {
    if (v === null) {
      drawing = false;
      return;
    }
    const x = (width * (i + POINTS - values.length)) / (POINTS - 1);
    const y = height - 2 * ratio - ((height - 4 * ratio) * v) / top;
    if (drawing) context.lineTo(x, y);
    else context.moveTo(x, y);
    drawing = true;
  });
  context.stroke();
}
