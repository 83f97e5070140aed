// The words of a search hit that its query has, marked (<mark>). Which words is the
// server's answer (POST /api/memory/search with "marks": true; memstrata.retrieval.hit_marks
// applies the BM25 side's own tokenizer), so the page holds no copy of that rule: each hit
// carries [start, end) stretches of its text in UTF-16 code units, which are a JavaScript
// string's indexes, so they slice the text as they are. Built as text nodes and elements,
// never as HTML.

import { el } from "./dom.js";

/** `text` as nodes, the stretches `spans` names in <mark>s (app.css names them for a screen
 * reader: a mark's role alone is not read out everywhere). A stretch out of order or past
 * the text's end (an answer from another server version) is left unmarked. */
export function marked(text, spans) {
  const nodes = [];
  let at = 0;
  for (const [start, end] of spans || []) {
    if (!(start >= at && end > start && end <= text.length)) continue;
    if (start > at) nodes.push(text.slice(at, start));
    nodes.push(el("mark", {}, text.slice(start, end)));
    at = end;
  }
  if (at < text.length) nodes.push(text.slice(at));
  return nodes;
}
