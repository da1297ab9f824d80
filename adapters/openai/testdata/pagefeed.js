// pagefeed.js runs the page's script (argv[2]) in node against a stub DOM and a stub fetch, and prints, as
// JSON, every request it made and every status it showed, while its key field changes (TestPageFeedInNode).
"use strict";
const fs = require("fs");
const vm = require("vm");

function element() {
  const el = {
    value: "", dataset: {}, style: {}, listeners: {},
    addEventListener(type, f) { el.listeners[type] = f; },
    classList: { add() {}, remove() {}, toggle() {}, contains() { return false; } },
    querySelector() { return element(); },
    querySelectorAll() { return []; },
    prepend() {}, append() {}, appendChild() {}, replaceChildren() {}, remove() {},
    getContext() { return new Proxy({}, { get: () => () => {} }); },
  };
  return el;
}
const els = {};
const document = {
  getElementById(id) { return (els[id] = els[id] || element()); },
  querySelectorAll() { return []; },
  createElement() { return element(); },
};

const calls = [];
const shown = [];
const enc = new TextEncoder();
// The server: only the key "good" may subscribe; a subscription sends hello and stays open until aborted.
async function fetch(url, opts = {}) {
  const headers = opts.headers || {};
  calls.push({ url, headers });
  if (url === "/health") return { ok: true, status: 200, json: async () => ({ status: "ok" }) };
  if (url !== "/v1/events") return { ok: false, status: 404 };
  if (headers["Authorization"] !== "Bearer good") return { ok: false, status: 401 };
  let sent = false;
  return {
    ok: true, status: 200,
    body: {
      getReader() {
        return {
          read() {
            if (!sent) {
              sent = true;
              return Promise.resolve({ value: enc.encode('data: {"type":"hello","time_ms":1,"hello":{"model":"toy","max_block_size":4,"block_size":4,"adaptive":true,"queue":{"waiting":0,"running":0}}}\n\n'), done: false });
            }
            return new Promise((_, reject) => {
              opts.signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
            });
          },
        };
      },
    },
  };
}

const sandbox = {
  document, fetch, console, TextDecoder, TextEncoder, AbortController, DOMException, JSON, Map, Set, Math, Promise,
  setTimeout: () => 0, // the retry pause only ends by a key change here
  setInterval: () => 0,
  clearTimeout() {}, requestAnimationFrame() {}, performance: { now: () => 0 },
};
sandbox.window = sandbox;
vm.createContext(sandbox);

const flush = () => new Promise((r) => setImmediate(r));
async function settle() { for (let i = 0; i < 20; i++) await flush(); }
function live() { return (els["live-status"] || {}).textContent; }

(async () => {
  vm.runInContext(fs.readFileSync(process.argv[2], "utf8"), sandbox);
  await settle();
  shown.push(live());
  for (const key of ["good", "other", "good"]) {
    els["apikey"].value = key;
    els["apikey"].listeners.change();
    await settle();
    shown.push(live());
  }
  process.stdout.write(JSON.stringify({ calls: calls.filter((c) => c.url !== "/health"), shown }));
})().catch((e) => { console.error(e); process.exit(1); });
