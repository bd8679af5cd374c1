// The page: three views (chat, engine, requests), the API key form, the theme, and one
// place messages are shown (errors never leave the page blank or spinning).

import { apiKey, setApiKey } from "./api.js";
import { initChat } from "./chat.js";
import { initEngine, showEngine } from "./engine.js";
import { initRequests, refresh as refreshRequests } from "./requests.js";
import { initSpeech } from "./speech.js";

const $ = (id) => document.getElementById(id);
const THEME = "atom.theme";

function notice(text, kind = "error") {
  const box = $("notice");
  box.textContent = text;
  box.dataset.kind = kind;
  box.hidden = false;
  if (text.includes("API key")) showKeyForm();
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => (box.hidden = true), kind === "error" ? 12000 : 4000);
}

function showView(name) {
  for (const view of ["chat", "engine", "requests"]) {
    $(`view-${view}`).hidden = view !== name;
    $(`tab-${view}`).setAttribute("aria-selected", String(view === name));
  }
  showEngine(name === "engine");
  if (name === "requests") refreshRequests();
  history.replaceState(null, "", `#${name}`);
}

function showKeyForm() {
  $("key-form").hidden = false;
  $("key-input").value = apiKey();
  $("key-input").focus();
}

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  $("code-light").media = theme === "light" ? "all" : "not all";
  $("code-dark").media = theme === "dark" ? "all" : "not all";
}

function initTheme() {
  const prefersDark = matchMedia("(prefers-color-scheme: dark)").matches;
  applyTheme(localStorage.getItem(THEME) || (prefersDark ? "dark" : "light"));
  $("theme-button").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    localStorage.setItem(THEME, next);
    applyTheme(next);
  });
}

function initKey() {
  $("key-button").addEventListener("click", () => {
    if ($("key-form").hidden) showKeyForm();
    else $("key-form").hidden = true;
  });
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey($("key-input").value.trim());
    $("key-form").hidden = true;
    notice("API key saved in this browser.", "info");
    location.reload();
  });
}

initTheme();
initKey();
for (const tab of document.querySelectorAll(".tabs button")) {
  tab.addEventListener("click", () => showView(tab.dataset.view));
}
initEngine(notice);
initRequests(notice);
initChat(notice);
initSpeech(notice);
const start = location.hash.slice(1);
showView(["chat", "engine", "requests"].includes(start) ? start : "chat");
