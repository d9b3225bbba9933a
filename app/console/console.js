// recalld console: a thin client of the public REST API (no private endpoints, no build step).
// The API key lives in this tab's sessionStorage only: never in a URL, a cookie or a log.

const KEY_STORAGE = "recalld.apiKey";
const API = new URL("v1/", document.baseURI);

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- key and errors

function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

// A key pasted into the field counts as soon as any request is made, as if "Use key" was clicked:
// searching with a key in plain sight and being told it is missing is a trap.
function useTypedKey() {
  const typed = $("api-key").value.trim();
  if (!typed) return;
  sessionStorage.setItem(KEY_STORAGE, typed);
  $("api-key").value = "";
  showKeyStatus();
}

function showKeyStatus() {
  const key = apiKey();
  // Only the public prefix (rk_xxxxxxxx) is ever shown; the secret part stays hidden.
  $("key-status").textContent = key
    ? `Using key ${key.split("_").slice(0, 2).join("_")}… (this tab only)`
    : "No key yet: kept in this tab only.";
}

const STATUS_HINTS = {
  401: "The API did not accept the key",
  403: "This key's role may not do that",
  404: "Not found in this tenant",
  413: "Too large",
  415: "Unsupported request",
  422: "Invalid input",
  429: "Too many requests",
  503: "The service is not ready",
};

class ApiFailure extends Error {
  constructor(status, body, retryAfter) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "http_error";
    this.details = error.details;
    this.retryAfter = retryAfter;
  }
}

function clearError() {
  const box = $("error");
  box.hidden = true;
  box.replaceChildren();
}

function showError(err) {
  const box = $("error");
  box.replaceChildren();
  const title = document.createElement("strong");
  if (err instanceof ApiFailure) {
    const hint = STATUS_HINTS[err.status] || "Request failed";
    title.textContent = `${hint} (${err.status} ${err.code}): `;
    box.append(title, document.createTextNode(err.message));
    if (err.status === 429 && err.retryAfter) {
      box.append(document.createTextNode(` Retry after ${err.retryAfter} s.`));
    }
    if (Array.isArray(err.details) && err.details.length) {
      const list = document.createElement("ul");
      for (const d of err.details) {
        const item = document.createElement("li");
        const where = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
        item.textContent = where ? `${where}: ${d.msg}` : String(d.msg ?? JSON.stringify(d));
        list.append(item);
      }
      box.append(list);
    }
  } else {
    title.textContent = "Could not reach the API: ";
    box.append(title, document.createTextNode(String(err.message || err)));
  }
  box.hidden = false;
}

async function api(method, path, { body, query } = {}) {
  const url = new URL(path, API);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = { Accept: "application/json" };
  useTypedKey();
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiFailure(response.status, data, response.headers.get("Retry-After"));
  return data;
}

// Runs an action, showing its API error in the alert box instead of failing silently.
async function guarded(action) {
  clearError();
  try {
    return await action();
  } catch (err) {
    showError(err);
    return undefined;
  }
}

// ---------------------------------------------------------------- small DOM helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function fmt(value, digits = 3) {
  return typeof value === "number" ? value.toFixed(digits) : "–";
}

function bar(label, fraction, text, kind = "") {
  const fill = el("span", { class: `bar-fill ${kind}` });
  // Set through the CSSOM: the page's CSP forbids inline style attributes.
  fill.style.width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`;
  return el(
    "div",
    { class: "bar-row" },
    el("span", { class: "bar-label", text: label }),
    el("span", { class: "bar", "aria-hidden": "true" }, fill),
    el("span", { class: "bar-text", text }),
  );
}

// Content with each [start, end) highlight span in <mark>. Spans count code points (as the
// server's Python strings do), not UTF-16 units, so text after an emoji stays aligned.
function highlighted(content, spans) {
  const chars = Array.from(content);
  const out = el("p", { class: "content" });
  let at = 0;
  for (const [start, end] of [...(spans || [])].sort((a, b) => a[0] - b[0])) {
    if (start < at) continue;
    out.append(chars.slice(at, start).join(""), el("mark", { text: chars.slice(start, end).join("") }));
    at = end;
  }
  out.append(chars.slice(at).join(""));
  return out;
}

// ---------------------------------------------------------------- tabs

const TABS = ["search", "browse", "scopes"];

function selectTab(name, focus = false) {
  for (const tab of TABS) {
    const selected = tab === name;
    const button = $(`tab-${tab}`);
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    $(`panel-${tab}`).hidden = !selected;
    if (selected && focus) button.focus();
  }
}

function setUpTabs() {
  for (const tab of TABS) {
    const button = $(`tab-${tab}`);
    button.addEventListener("click", () => selectTab(tab));
    button.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) {
        event.preventDefault();
        selectTab(TABS[(TABS.indexOf(tab) + step + TABS.length) % TABS.length], true);
      }
    });
  }
}

// ---------------------------------------------------------------- search and recall

function searchBreakdown(result, best) {
  const b = result.score_breakdown || {};
  const box = el("div", { class: "breakdown", "aria-label": "Score breakdown" });
  box.append(bar("score", result.score, fmt(result.score), "total"));
  if (typeof b.fused === "number") box.append(bar(`fused (${b.fusion})`, b.fused, fmt(b.fused)));
  if (b.calibration) box.append(bar("adaptive, before calibration", b.calibration.adaptive, fmt(b.calibration.adaptive)));
  for (const leg of Object.keys(b.ranks || {}).sort()) {
    const rank = b.ranks[leg];
    const raw = b.raw_scores ? b.raw_scores[leg] : null;
    const weight = b.weights ? b.weights[leg] : null;
    const text =
      rank === null || rank === undefined
        ? `not found by this leg · weight ${fmt(weight, 2)}`
        : `rank ${rank} · raw ${fmt(raw)} · weight ${fmt(weight, 2)}`;
    // A leg's raw scores have their own scale (BM25 is unbounded): bars compare with this answer's best.
    box.append(bar(leg, best[leg] ? (raw || 0) / best[leg] : 0, text, `leg-${leg}`));
  }
  if (typeof b.decay === "number") box.append(bar("decay", b.decay, `× ${fmt(b.decay)}`, "decay"));
  return box;
}

function recallBreakdown(result, weights) {
  const box = el("div", { class: "breakdown", "aria-label": "Score breakdown" });
  box.append(bar("score", result.score, fmt(result.score), "total"));
  const signals = [
    ["relevance", result.relevance, weights.relevance],
    ["importance", result.importance / 10, weights.importance],
    ["recency", result.recency, weights.recency],
    ["confidence", result.effective_confidence, weights.confidence],
  ];
  for (const [name, value, weight] of signals) {
    box.append(bar(name, value, `${fmt(value)} × weight ${fmt(weight, 2)} = ${fmt(value * weight)}`));
  }
  return box;
}

function resultItem(result, breakdown) {
  const open = el("button", { type: "button", class: "secondary small", text: "Open" });
  open.addEventListener("click", () => {
    showMemory(result);
    selectTab("browse");
  });
  const meta = [
    result.type,
    `scope ${result.scope}`,
    result.match_type && `match ${result.match_type}`,
    result.path && `${result.path}:${result.start_line}–${result.end_line}`,
  ]
    .filter(Boolean)
    .map((part) => el("span", { class: "tag", text: part }));
  return el(
    "li",
    { class: "result" },
    el(
      "div",
      { class: "result-head" },
      el("span", { class: "score", text: fmt(result.score) }),
      ...meta,
      open,
    ),
    highlighted(result.content, result.highlights),
    breakdown,
  );
}

function searchBody(form) {
  const data = new FormData(form);
  const body = { limit: Number(data.get("limit") || 10) };
  const scope = String(data.get("scope") || "").trim();
  if (scope) body.scope = scope;
  if (data.get("operation") === "recall") {
    body.topic = data.get("query");
    return ["recall", body];
  }
  body.query = data.get("query");
  body.mode = data.get("mode");
  // "default" sends no fusion, so the scope's or the service's default applies, as for any client.
  const fusion = data.get("fusion");
  if (fusion) body.fusion = fusion;
  const types = data.getAll("types");
  if (types.length) body.types = types;
  return ["search", body];
}

async function runSearch(event) {
  event.preventDefault();
  const [operation, body] = searchBody(event.target);
  const list = $("results");
  $("search-status").textContent = "Searching…";
  const answer = await guarded(() => api("POST", operation, { body }));
  $("search-status").textContent = "";
  list.replaceChildren();
  $("legend").hidden = true;
  if (!answer) return;
  if (operation === "recall") {
    for (const r of answer.results) list.append(resultItem(r, recallBreakdown(r, answer.weights)));
  } else {
    const best = {};
    for (const r of answer.results) {
      for (const [leg, raw] of Object.entries(r.score_breakdown.raw_scores || {})) {
        if (typeof raw === "number") best[leg] = Math.max(best[leg] || 0, raw);
      }
    }
    for (const r of answer.results) list.append(resultItem(r, searchBreakdown(r, best)));
  }
  const n = answer.results.length;
  $("legend").hidden = n === 0;
  $("legend").textContent =
    operation === "recall"
      ? "Bars: each signal from 0 to 1 (importance ÷ 10); the score is their weighted sum."
      : "Bars: score, fused score and decay from 0 to 1; each leg's raw score against the best raw score of that leg in this answer. " +
        "With the default fusion the score is the estimated probability that the result is relevant.";
  const how = operation === "recall" ? "recall" : `${answer.mode}, ${answer.keyword_ranker}`;
  const embedded = answer.embedding_used ? "query embedded" : "no embedding";
  // Abstention: candidates were found, none was likely enough to be relevant.
  const abstained = answer.abstained
    ? ` Nothing relevant enough (best score ${fmt(answer.best_score)}); min_score 0 shows the best-effort list.`
    : "";
  $("search-status").textContent = `${n} result${n === 1 ? "" : "s"} (${how}; ${embedded}).${abstained}`;
}

// ---------------------------------------------------------------- browse, open, forget, store

let browseCursor = null;

function browseRow(memory) {
  const open = el("button", { type: "button", class: "secondary small", text: "Open" });
  open.addEventListener("click", () => showMemory(memory));
  const text = memory.content.length > 140 ? `${memory.content.slice(0, 140)}…` : memory.content;
  // A superseded or retracted fact is history, not what is true now: say so in the list.
  const preview = memory.validity && memory.validity !== "active" ? `[${memory.validity}] ${text}` : text;
  return el(
    "tr",
    { "data-id": memory.id },
    el("td", { text: new Date(memory.created_at).toLocaleString() }),
    el("td", { text: memory.scope }),
    el("td", { text: preview }),
    el("td", {}, open),
  );
}

async function listMemories(more) {
  const data = new FormData($("browse-form"));
  const query = {
    type: data.get("type"),
    scope: String(data.get("scope") || "").trim(),
    limit: data.get("limit"),
    cursor: more ? browseCursor : null,
  };
  const page = await guarded(() => api("GET", "memories", { query }));
  if (!page) return;
  if (!more) $("browse-rows").replaceChildren();
  $("browse-rows").append(...page.items.map(browseRow));
  browseCursor = page.next_cursor;
  $("browse-more").hidden = !browseCursor;
  const shown = $("browse-rows").children.length;
  $("browse-caption").textContent = `${shown} ${query.type}${shown === 1 ? "" : "s"} shown, newest first.`;
}

function showMemory(memory) {
  const list = el("dl", { class: "fields" });
  for (const [name, value] of Object.entries(memory)) {
    if (name === "content") continue;
    const shown = value !== null && typeof value === "object" ? JSON.stringify(value) : String(value);
    list.append(el("dt", { text: name }), el("dd", { text: shown }));
  }
  const forget = el("button", { type: "button", class: "danger", text: "Forget this memory" });
  forget.addEventListener("click", () => forgetMemory(memory));
  const actions = el("div", { class: "actions" }, forget);
  const chain = el("ol", { id: "history", class: "history", "aria-label": "History, newest first" });
  if (memory.validity) {
    const history = el("button", { type: "button", class: "secondary", text: "History" });
    history.addEventListener("click", () => showHistory(memory, chain));
    actions.prepend(history);
  }
  $("detail").replaceChildren(el("p", { class: "content", text: memory.content }), list, actions, chain);
  // Keyboard and screen-reader users land on what they opened.
  $("detail-heading").focus();
}

async function showHistory(memory, chain) {
  const page = await guarded(() => api("GET", `memories/${encodeURIComponent(memory.id)}/history`));
  if (!page) return;
  chain.replaceChildren(
    ...page.items.map((item) => {
      const until = item.valid_to ? new Date(item.valid_to).toLocaleString() : "now";
      const open = el("button", { type: "button", class: "secondary small", text: "Open" });
      open.addEventListener("click", () => showMemory(item));
      return el(
        "li",
        { "data-id": item.id },
        el("span", { class: "muted", text: `${item.validity}, ${new Date(item.valid_from).toLocaleString()} – ${until}: ` }),
        el("span", { text: item.content }),
        " ",
        open,
      );
    }),
  );
}

async function forgetMemory(memory) {
  if (!window.confirm(`Forget this ${memory.type} for good?\n\n${memory.content.slice(0, 200)}`)) return;
  const done = await guarded(async () => {
    await api("DELETE", `memories/${encodeURIComponent(memory.id)}`);
    return true;
  });
  if (!done) return;
  $("detail").replaceChildren(el("p", { class: "muted", text: `Forgot memory ${memory.id}.` }));
  for (const row of $("browse-rows").querySelectorAll("tr")) {
    if (row.dataset.id === memory.id) row.remove();
  }
}

async function openById(event) {
  event.preventDefault();
  const id = String(new FormData(event.target).get("id") || "").trim();
  const memory = await guarded(() => api("GET", `memories/${encodeURIComponent(id)}`));
  if (memory) showMemory(memory);
}

async function storeMemory(event) {
  event.preventDefault();
  $("store-status").textContent = "";
  const data = new FormData(event.target);
  const type = data.get("type");
  const body = {
    content: data.get("content"),
    importance: Number(data.get("importance") || 5),
    tags: String(data.get("tags") || "")
      .split(",")
      .map((t) => t.trim())
      .filter(Boolean),
  };
  const scope = String(data.get("scope") || "").trim();
  if (scope) body.scope = scope;
  if (type === "episode") body.butler = String(data.get("butler") || "").trim();
  const stored = await guarded(() => api("POST", `${type}s`, { body }));
  if (!stored) return;
  // The write says what it did: a repeat answers the memory already stored.
  const replaced = stored.superseded.length ? ` It superseded ${stored.superseded.join(", ")}.` : "";
  const similar = stored.similar_to.length ? ` Similar: ${stored.similar_to.map((s) => s.id).join(", ")}.` : "";
  $("store-status").textContent = stored.duplicate_of
    ? `Already stored: ${stored.type} ${stored.id} (duplicate, confirmed).`
    : `Stored ${stored.type} ${stored.id}.${replaced}${similar}`;
  event.target.elements.content.value = "";
  showMemory(stored);
}

// ---------------------------------------------------------------- scope settings

async function loadScope(event) {
  event.preventDefault();
  $("scope-status").textContent = "";
  const scope = $("scope-name").value.trim();
  const settings = await guarded(() => api("GET", `scopes/${encodeURIComponent(scope)}/settings`));
  if (!settings) return;
  $("scope-json").value = JSON.stringify(settings, null, 2);
  $("scope-status").textContent = `Loaded settings of scope ${scope}.`;
}

async function saveScope(event) {
  event.preventDefault();
  $("scope-status").textContent = "";
  const scope = $("scope-name").value.trim();
  if (!scope) {
    showError(new Error("name the scope first"));
    return;
  }
  let settings;
  try {
    settings = JSON.parse($("scope-json").value || "{}");
  } catch (err) {
    showError(new Error(`the settings are not valid JSON: ${err.message}`));
    return;
  }
  const saved = await guarded(() =>
    api("PUT", `scopes/${encodeURIComponent(scope)}/settings`, { body: settings }),
  );
  if (!saved) return;
  $("scope-json").value = JSON.stringify(saved, null, 2);
  $("scope-status").textContent = `Saved settings of scope ${scope}.`;
}

// ---------------------------------------------------------------- wiring

function start() {
  setUpTabs();
  showKeyStatus();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    useTypedKey();
    clearError();
  });
  $("key-clear").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    showKeyStatus();
  });
  $("operation").addEventListener("change", (event) => {
    const recall = event.target.value === "recall";
    for (const node of document.querySelectorAll(".search-only")) node.hidden = recall;
  });
  $("store-type").addEventListener("change", (event) => {
    const episode = event.target.value === "episode";
    document.querySelector(".episode-only").hidden = !episode;
    $("store-butler").required = episode;
  });
  $("search-form").addEventListener("submit", runSearch);
  $("browse-form").addEventListener("submit", (event) => {
    event.preventDefault();
    listMemories(false);
  });
  $("browse-more").addEventListener("click", () => listMemories(true));
  $("open-form").addEventListener("submit", openById);
  $("store-form").addEventListener("submit", storeMemory);
  $("scope-form").addEventListener("submit", loadScope);
  $("scope-edit").addEventListener("submit", saveScope);
}

start();
