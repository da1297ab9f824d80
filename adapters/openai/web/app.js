// higgs' page: a playground over the OpenAI API and a live view of /v1/events. Plain browser JavaScript,
// no build step and nothing fetched from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  mode: "chat",
  history: [],          // chat messages sent so far
  gens: new Map(),      // id -> generation view
  latest: null,         // id of the newest generation
  mine: new Set(),      // ids of this page's requests
  maxBlock: 1,
  abort: null,
};
const MAX_GENS = 6;

// headers are a request's: the key (when one is typed) as a Bearer header, never in a URL; JSON's content
// type for a body.
function headers(json = true) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const key = $("apikey").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

// readSSE calls onData with each `data:` payload of a server-sent event response body.
async function readSSE(resp, onData) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of frame.split("\n")) {
        if (line.startsWith("data: ")) onData(line.slice(6));
      }
    }
  }
}

// ---------- live view ----------

function genView(id) {
  let g = state.gens.get(id);
  if (g) return g;
  const el = document.createElement("div");
  el.className = "gen";
  el.dataset.id = id;
  if (state.mine.has(id)) el.classList.add("mine");
  el.innerHTML = '<div class="head"><span class="id"></span><span class="st">running</span><span class="info"></span><span class="rate"></span></div><div class="strip"></div>';
  el.querySelector(".id").textContent = id;
  $("gens").prepend(el);
  g = { id, el, strip: el.querySelector(".strip"), rounds: [], accepted: [], draftRounds: 0, blockSize: state.maxBlock, done: false };
  state.gens.set(id, g);
  while (state.gens.size > MAX_GENS) {
    const oldest = state.gens.keys().next().value;
    state.gens.get(oldest).el.remove();
    state.gens.delete(oldest);
  }
  state.latest = id;
  return g;
}

function onEvent(ev) {
  switch (ev.type) {
    case "hello": {
      const h = ev.hello;
      state.maxBlock = h.max_block_size;
      $("model").textContent = (h.model || "loading") + " · block " + h.block_size + (h.adaptive ? " adaptive" : " fixed");
      setQueue(h.queue);
      setLive("live: connected", true);
      break;
    }
    case "queue": setQueue(ev.queue); break;
    case "model": {
      // A model of a server with several loading or unloading on demand.
      const m = ev.model;
      let text = "model " + m.name + ": " + m.state;
      if (m.reason) text += " (" + m.reason + ")";
      if (m.duration_ms) text += " in " + Math.round(m.duration_ms) + " ms";
      if (m.error) text += ": " + m.error;
      setLive(text, m.state !== "failed");
      break;
    }
    case "start": {
      const g = genView(ev.id);
      g.blockSize = ev.start.block_size;
      g.accepted = new Array(Math.max(0, g.blockSize - 1)).fill(0);
      g.el.querySelector(".info").textContent = (ev.start.chat ? "chat" : "completion") + " · prompt " + ev.start.prompt_tokens +
        " tok · block ≤" + ev.start.block_size + (ev.start.adaptive ? " adaptive" : "");
      break;
    }
    case "round": onRound(genView(ev.id), ev.round); break;
    case "policy": onPolicy(ev); break;
    case "end": {
      const g = genView(ev.id);
      g.done = true;
      g.usage = ev.end.usage;
      const st = g.el.querySelector(".st");
      st.textContent = ev.end.finish;
      g.el.dataset.finish = ev.end.finish;
      g.el.querySelector(".rate").textContent = ev.end.completion_tokens + " tok · " + ev.end.tokens_per_s.toFixed(1) + " tok/s · τ " + ev.end.usage.tau.toFixed(2);
      break;
    }
  }
  if (ev.dropped) setLive("live: " + ev.dropped + " events dropped (page too slow)", false);
}

function onRound(g, r) {
  const span = document.createElement("span");
  span.className = "round";
  span.dataset.step = r.step;
  span.dataset.drafting = r.block_size > 1 ? "1" : "0";
  span.title = "step " + r.step + " · block " + r.block_size + " · accepted " + r.accepted + " · " + r.policy +
    " · draft " + r.draft_ms.toFixed(2) + " ms · verify " + r.verify_ms.toFixed(2) + " ms";
  for (const t of r.tokens) {
    const s = document.createElement("span");
    s.className = "tok " + t.kind;
    s.dataset.kind = t.kind;
    // Whitespace is drawn so that a newline or a tab token stays visible on its one line.
    s.textContent = t.text === "" ? "·" : t.text.replace(/\n/g, "↵").replace(/\t/g, "⇥");
    s.title = t.kind + " · id " + t.id;
    span.appendChild(s);
  }
  const nearBottom = g.strip.scrollTop + g.strip.clientHeight >= g.strip.scrollHeight - 4;
  g.strip.appendChild(span);
  if (nearBottom) g.strip.scrollTop = g.strip.scrollHeight;
  if (r.block_size > 1) {
    g.draftRounds++;
    for (let i = 0; i < r.accepted; i++) {
      if (i >= g.accepted.length) g.accepted.push(0);
      g.accepted[i]++;
    }
  }
  g.rounds.push({ tau: r.tau, tps: r.tokens_per_s });
  g.el.querySelector(".rate").textContent = r.generated + " tok · " + r.tokens_per_s.toFixed(1) + " tok/s · τ " + r.tau.toFixed(2);
  if (g.id === state.latest) draw(g);
}

function onPolicy(ev) {
  const li = document.createElement("li");
  const t = new Date(ev.time_ms).toLocaleTimeString();
  li.innerHTML = '<span class="t"></span> <span class="gid"></span> <span class="mode"></span>: <span class="why"></span>';
  li.querySelector(".t").textContent = t;
  li.querySelector(".gid").textContent = ev.id;
  const m = li.querySelector(".mode");
  m.textContent = ev.policy.mode;
  m.classList.add(ev.policy.mode);
  li.querySelector(".why").textContent = ev.policy.reason;
  const list = $("decisions");
  list.prepend(li);
  while (list.children.length > 200) list.lastChild.remove();
}

function draw(g) {
  // Per-position acceptance: rounds whose slot i was accepted / draft-verify rounds.
  const bars = $("positions");
  bars.replaceChildren();
  const n = Math.max(g.accepted.length, 0);
  for (let i = 0; i < n; i++) {
    const b = document.createElement("div");
    b.className = "bar";
    const frac = g.draftRounds ? g.accepted[i] / g.draftRounds : 0;
    b.style.height = (100 * frac).toFixed(1) + "%";
    b.title = "position " + (i + 1) + ": " + g.accepted[i] + " / " + g.draftRounds + " rounds";
    const l = document.createElement("span");
    l.textContent = i + 1;
    b.appendChild(l);
    bars.appendChild(b);
  }
  if (n === 0) bars.textContent = "no speculation in this generation";
  const c = $("chart");
  const ctx = c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  const pts = g.rounds;
  if (pts.length < 1) return;
  const maxTau = Math.max(2, ...pts.map((p) => p.tau));
  const maxTps = Math.max(1, ...pts.map((p) => p.tps));
  const line = (key, max, color) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach((p, i) => {
      const x = pts.length === 1 ? c.width / 2 : (i / (pts.length - 1)) * (c.width - 10) + 5;
      const y = c.height - 5 - (p[key] / max) * (c.height - 20);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  };
  line("tau", maxTau, "#1f8a4c");
  line("tps", maxTps, "#2f62c6");
  ctx.fillStyle = "#6b6b66";
  ctx.font = "11px sans-serif";
  ctx.fillText("τ max " + maxTau.toFixed(2) + " · " + maxTps.toFixed(0) + " tok/s max", 6, 12);
}

function setQueue(q) { $("queue").textContent = "queue " + q.waiting + " · running " + q.running; }
function setLive(text, ok) {
  const el = $("live-status");
  el.textContent = text;
  el.className = "pill " + (ok ? "ok" : "bad");
  el.dataset.connected = ok ? "1" : "0";
}

// The feed shows what the key may watch: its tenant's generations, every tenant's with the operator key
// (--admin-key), all of them on a server without keys. A changed key ends the subscription and starts one
// with the new key at once.
const feed = { abort: null, wake: null };

function resubscribe() {
  if (feed.abort) feed.abort.abort();
  if (feed.wake) feed.wake();
}

async function subscribe() {
  for (;;) {
    feed.abort = new AbortController();
    let changed = false;
    try {
      const resp = await fetch("/v1/events", { headers: headers(false), signal: feed.abort.signal });
      if (resp.status === 401) throw new Error("enter the API key");
      if (!resp.ok) throw new Error("events: HTTP " + resp.status);
      await readSSE(resp, (d) => onEvent(JSON.parse(d)));
      setLive("live: stream ended, reconnecting", false);
    } catch (e) {
      changed = feed.abort.signal.aborted;
      setLive(changed ? "live: key changed, reconnecting" : "live: " + e.message + ", retrying", false);
    }
    if (!changed) await new Promise((r) => { feed.wake = r; setTimeout(r, 2000); });
    feed.wake = null;
  }
}

async function health() {
  try {
    const r = await fetch("/health");
    const j = await r.json();
    $("health").textContent = "health " + j.status;
    $("health").className = "pill " + (r.ok ? "ok" : "bad");
  } catch (e) {
    $("health").textContent = "health unreachable";
    $("health").className = "pill bad";
  }
}

// ---------- playground ----------

function params() {
  const body = { max_tokens: +$("p-max").value || 64, temperature: +$("p-temp").value };
  if ($("p-topp").value !== "" && +$("p-topp").value !== 1) body.top_p = +$("p-topp").value;
  if (+$("p-topk").value > 0) body.top_k = +$("p-topk").value;
  if ($("p-seed").value !== "") body.seed = +$("p-seed").value;
  if ($("p-bs").value !== "") body.block_size = +$("p-bs").value;
  const stop = $("p-stop").value.replace(/\\n/g, "\n");
  if (stop) body.stop = [stop];
  return body;
}

function showHistory() {
  const h = $("history");
  h.replaceChildren();
  for (const m of state.history) {
    const d = document.createElement("div");
    d.className = "msg " + m.role;
    d.textContent = m.content;
    h.appendChild(d);
  }
}

function showUsage(u, id) {
  const el = $("usage");
  el.hidden = false;
  const s = u.speculative || {};
  el.dataset.id = id;
  el.dataset.accepted = s.accepted_tokens;
  el.dataset.drafted = s.draft_tokens;
  el.dataset.rounds = s.rounds;
  el.replaceChildren();
  const add = (label, value) => {
    const b = document.createElement("b");
    b.textContent = value;
    el.append(label + " ", b, "  ");
  };
  add("id", id);
  add("prompt", u.prompt_tokens);
  add("completion", u.completion_tokens);
  add("rounds", s.rounds);
  add("plain steps", s.plain_steps);
  add("drafted", s.draft_tokens);
  add("accepted", s.accepted_tokens);
  add("τ", (s.tau || 0).toFixed(2));
  if (s.policy) {
    el.append(document.createElement("br"));
    add("policy", s.policy.mode);
    el.append(s.policy.reason);
  }
}

async function send() {
  let text = $("prompt").value;
  if (!text.trim()) {
    // An empty box sends the example it shows (the form the bundled model was trained on), written into the
    // box so that what was sent is on screen.
    text = $("prompt").placeholder;
    if (!text.trim()) {
      $("error").textContent = "type a prompt first: there is no example prompt to send";
      $("error").hidden = false;
      return;
    }
    $("prompt").value = text;
  }
  const body = params();
  const stream = $("p-stream").checked;
  body.stream = stream;
  if (stream) body.stream_options = { include_usage: true };
  let path;
  if (state.mode === "chat") {
    state.history.push({ role: "user", content: text });
    body.messages = state.history.slice();
    path = "/v1/chat/completions";
  } else {
    body.prompt = text;
    path = "/v1/completions";
  }
  showHistory();
  $("output").textContent = "";
  $("error").hidden = true;
  $("usage").hidden = true;
  $("send").disabled = true;
  $("stop").disabled = false;
  state.abort = new AbortController();
  let out = "";
  let id = "";
  try {
    const resp = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal: state.abort.signal });
    if (!resp.ok) {
      const j = await resp.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || "HTTP " + resp.status);
    }
    if (stream) {
      await readSSE(resp, (d) => {
        if (d === "[DONE]") return;
        const j = JSON.parse(d);
        if (j.error) throw new Error(j.error.message);
        if (j.id && !id) { id = j.id; state.mine.add(id); const g = state.gens.get(id); if (g) g.el.classList.add("mine"); }
        for (const c of j.choices || []) {
          const piece = state.mode === "chat" ? (c.delta && c.delta.content) || "" : c.text || "";
          out += piece;
        }
        $("output").textContent = out;
        if (j.usage) showUsage(j.usage, id);
      });
    } else {
      const j = await resp.json();
      id = j.id;
      state.mine.add(id);
      const c = j.choices[0];
      out = state.mode === "chat" ? c.message.content || "" : c.text;
      $("output").textContent = out;
      showUsage(j.usage, id);
    }
    $("output").dataset.id = id;
    $("output").dataset.done = "1";
    if (state.mode === "chat") {
      // The answer joins the conversation; the box is cleared for the next turn.
      state.history.push({ role: "assistant", content: out });
      showHistory();
      $("output").textContent = "";
      $("prompt").value = "";
    }
  } catch (e) {
    if (state.mode === "chat" && state.history.length && state.history[state.history.length - 1].role === "user") state.history.pop();
    $("error").textContent = e.name === "AbortError" ? "stopped" : e.message;
    $("error").hidden = false;
  } finally {
    $("send").disabled = false;
    $("stop").disabled = true;
    state.abort = null;
  }
}

function setMode(mode) {
  state.mode = mode;
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.mode === mode);
  $("history").hidden = mode !== "chat";
  $("clear").hidden = mode !== "chat";
  // The demo is a Go-code model: these are the forms it was trained on.
  $("prompt").placeholder = mode === "chat"
    ? "Complete this Go code:\n\n// Len returns the number of bytes of the unread portion of the buffer.\nfunc (b *Buffer) Len() int {"
    : "// Len returns the number of bytes of the unread portion of the buffer.\nfunc (b *Buffer) Len() int {";
}

$("send").addEventListener("click", send);
$("apikey").addEventListener("change", resubscribe);
$("stop").addEventListener("click", () => state.abort && state.abort.abort());
$("clear").addEventListener("click", () => { state.history = []; showHistory(); });
$("prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(); });
for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => setMode(b.dataset.mode));
setMode("chat");
health();
setInterval(health, 5000);
subscribe();
