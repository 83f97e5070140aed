// The search view: POST /api/memory/search with a source filter; every hit shows where it
// came from and the numbers behind its score (BM25 rank, vector rank, RRF, time decay).

import { api, reason } from "./api.js";
import { $, asSentence, banner, bdi, cjkLang, el, number, when } from "./dom.js";
import { marked } from "./search-marks.js";

const SOURCE_LABELS = { memory: "memory files", conversation: "conversations", notes: "notes" };
const TOP_K_CHOICES = [5, 10, 20, 50, 100];
let maxChars = Infinity;
// Bumped by every search (and every refusal): an answer to an older one is dropped, so a
// slow first search cannot overwrite the results of the query now in the box.
let latest = 0;

export function init(limits) {
  const sources = $("sources");
  sources.replaceChildren(el("legend", {}, "Sources"));
  for (const source of limits.search_sources) {
    sources.append(el("label", { class: "check" },
      el("input", { type: "checkbox", value: source, checked: true }),
      SOURCE_LABELS[source] || source));
  }
  const topK = $("top-k");
  topK.replaceChildren(...TOP_K_CHOICES.filter((k) => k <= limits.max_top_k).map((k) =>
    el("option", { value: k, selected: k === 10 }, `top ${k}`)));
  // No maxLength: it would cut a pasted query silently. run() refuses with the limit instead.
  maxChars = limits.max_query_chars;
}

/** Sign-out: no hits of this user stay in the page. */
export function reset() {
  latest += 1;
  $("query").value = "";
  clear("");
}

// A hit's text longer than its box (app.css caps it at 12em) scrolls: it is then a tab stop,
// so that a keyboard can scroll it too (WCAG 2.1.1); one that fits is not. Measured again
// when its width changes (a phone turned, a window resized).
const scrolling = new ResizeObserver((entries) => {
  for (const { target } of entries) {
    if (target.scrollHeight > target.clientHeight) target.tabIndex = 0;
    else target.removeAttribute("tabindex");
  }
});

/** Replace the hits on screen (observed until they are replaced). */
function showHits(...items) {
  scrolling.disconnect();
  $("hits").replaceChildren(...items);
  for (const text of $("hits").querySelectorAll(".hit-text")) scrolling.observe(text);
}

/** Empty the results, with a message (or none) saying why. */
function clear(message, kind = "warn") {
  $("search-summary").textContent = "";
  showHits();
  $("hits").setAttribute("aria-busy", "false");
  banner($("search-message"), message, kind);
}

export function wire() {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    run();
  });
}

async function run() {
  const query = $("query").value;
  const boxes = [...$("sources").querySelectorAll("input[type=checkbox]")];
  const chosen = boxes.filter((box) => box.checked).map((box) => box.value);
  const ticket = ++latest;
  let refused = "";
  if (!query.trim()) refused = "Type something to search for.";
  else if ([...query].length > maxChars) {
    refused = `Your search is ${number([...query].length)} characters long; the limit is ` +
      `${number(maxChars)}. Shorten it and search again.`;
  } else if (!chosen.length) refused = "Choose at least one source.";
  if (refused) {
    // the results on screen would belong to another search
    clear(refused);
    if (chosen.length) $("query").focus();
    return;
  }
  // marks: where each hit's text matches, by the server's own rule (search-marks.js)
  const body = { query, top_k: Number($("top-k").value), marks: true };
  if (chosen.length < boxes.length) body.sources = chosen;
  banner($("search-message"), "");
  $("hits").setAttribute("aria-busy", "true");
  $("search-summary").textContent = "Searching…";
  try {
    const { data } = await api("POST", "api/memory/search", { body });
    if (ticket === latest) show(data);
  } catch (error) {
    if (ticket === latest) clear(["Search failed. ", ...reason(error)], "error");
  } finally {
    if (ticket === latest) $("hits").setAttribute("aria-busy", "false");
  }
}

function show(data) {
  const mode = data.mode === "hybrid"
    ? "hybrid: BM25 + vectors, fused by RRF, time-decayed"
    : "BM25 only (no vectors for this search)";
  const ms = Object.values(data.timings_ms || {}).reduce((a, b) => a + b, 0);
  $("search-summary").textContent =
    `${data.hits.length} ${data.hits.length === 1 ? "hit" : "hits"} · ${mode} · ${ms.toFixed(1)} ms`;
  const warnings = (data.warnings || []).map(asSentence);
  const notes = looseOnly(data) ? [...warnings, LOOSE_ONLY] : warnings;
  if (notes.length) banner($("search-message"), notes.join(" "), warnings.length ? "warn" : "info");
  showHits(...(data.hits.length
    ? data.hits.map(hit)
    : [el("li", { class: "empty" }, "Nothing in this user's memory matches.")]));
}

// RRF ranks by position alone, so a query that no passage shares a word with still fills
// every place with the nearest vectors, however far: said, rather than left to a reader to
// find in each hit's BM25 rank. The API gives no cosine to judge "near" by, and its
// answers stay as the spec has them.
const LOOSE_ONLY =
  "No close matches: none of these hits is a keyword match for your search, so they are " +
  "only the nearest in meaning and may be unrelated.";

/** A hybrid search whose hits all came from the vector side alone. */
function looseOnly(data) {
  return data.mode === "hybrid" && data.hits.length > 0 &&
    data.hits.every((h) => (h.explain?.bm25_rank ?? null) === null);
}

/** Where a hit came from, the session id or path in a `bdi`: its letters or bidi control
 * characters cannot reorder "session … · turn n" around it. */
function origin(h) {
  const path = h.file_path || "";
  if (h.source === "conversation") {
    const match = /^sessions\/(.+)\/(\d+)$/.exec(path);
    if (match) return ["session ", bdi(match[1]), ` · turn ${match[2]}`];
  }
  const what = h.source === "memory" ? "file" : h.source;
  return path ? [`${what} `, bdi(path)] : what;
}

function hit(h) {
  const e = h.explain || {};
  const time = when(h.created_at);
  const rank = (value, what) => (value === null || value === undefined
    ? el("span", { title: `not among the ${what} candidates` }, "—")
    : el("span", {}, `#${value}`));
  let decay;
  if (e.resident) decay = el("span", { title: "memory files never decay" }, "none (resident file)");
  else if (e.decay_factor === null || e.decay_factor === undefined) decay = el("span", {}, "—");
  else {
    const age = e.age_days === null || e.age_days === undefined ? "" : ` (age ${e.age_days.toFixed(1)} d)`;
    decay = el("span", {}, `×${e.decay_factor.toFixed(3)}${age}`);
  }
  const fact = (label, value) => el("div", { class: "fact" }, el("dt", {}, label), el("dd", {}, value));
  return el("li", { class: "hit" },
    el("div", { class: "hit-head" },
      el("span", { class: `badge source-${h.source}` }, h.source),
      el("span", { class: "origin mono" }, origin(h)),
      el("time", { datetime: h.created_at, title: time.title }, time.text),
      el("span", { class: "score mono", title: "RRF score × decay" }, `score ${h.score.toFixed(4)}`)),
    el("p", { class: "hit-text", dir: "auto", lang: cjkLang(h.text) }, marked(h.text, h.marks)),
    el("dl", { class: "explain", "aria-label": "How this score was computed" },
      fact("BM25 rank", rank(e.bm25_rank, "keyword")),
      fact("vector rank", rank(e.vector_rank, "vector")),
      fact("RRF", el("span", { class: "mono" }, (e.rrf_score ?? 0).toFixed(5))),
      fact("decay", decay)));
}
