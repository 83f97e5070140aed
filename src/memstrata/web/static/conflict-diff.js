// The conflict view's diff: the version someone else saved (left) beside the user's text
// (right), each differing line said to be whose change it is, unchanged runs folded, and
// Previous/Next to step through the changes. Who changed a line is read against the
// version the user started from: a line only the other version has is theirs (added by
// them) unless the user's starting version had it too (then the user removed it), and the
// other way round. A 200 KB file is some 3,000 lines; drawing every one of them took
// seconds and a table 128,000 px tall, so only the changes and a few lines around each are
// drawn until a fold is opened. Nothing here merges: re-apply is the server's. Alt+↑ and
// Alt+↓ are Previous and Next from anywhere in the view (`stepKeys`).

import { diffLines, sideBySide, splitLines } from "./diff.js";
import { $, el, number } from "./dom.js";

// Unchanged lines shown above and below each change.
export const CONTEXT = 3;
// A run this short is shown rather than folded: a button to open it would be as tall.
const MIN_FOLD = 3;

// Per kind: the cell's class, its visible marker and the words assistive tech reads.
const THEM = "someone else";
const KINDS = {
  theirs: { cls: "by-them", sign: "+", words: (paired) => `${paired ? "changed" : "added"} by ${THEM}` },
  "mine-removed": { cls: "by-you gone", sign: "−", words: () => "removed by you" },
  mine: { cls: "by-you", sign: "+", words: (paired) => `${paired ? "changed" : "added"} by you` },
  "theirs-removed": { cls: "by-them gone", sign: "−", words: () => `removed by ${THEM}` },
};

/** Indices of the lines of `b` that `a` does not have (added or changed in `b`). When the two
 * differ too much for a line diff (diff.js), a line whose text `a` lacks anywhere. */
function newIn(a, b) {
  const fresh = new Set();
  const ops = diffLines(a, b);
  if (ops) {
    for (const op of ops) if (op.op === "+") fresh.add(op.b);
    return fresh;
  }
  const had = new Set(a);
  b.forEach((line, i) => had.has(line) || fresh.add(i));
  return fresh;
}

/** Rows of `theirs` beside `mine` (diff.js `sideBySide`), each differing side's `kind`
 * saying whose change it is against `base`: "theirs" / "mine-removed" on the left, "mine" /
 * "theirs-removed" on the right. Null when the two differ too much to compare by line. */
export function conflictRows(base, theirs, mine) {
  const t = splitLines(theirs);
  const m = splitLines(mine);
  const ops = diffLines(t, m);
  if (!ops) return null;
  const b = splitLines(base);
  const theirsNew = newIn(b, t);
  const mineNew = newIn(b, m);
  const rows = sideBySide(ops, t, m);
  for (const row of rows) {
    if (row.left && row.left.kind !== "same") {
      row.left.kind = theirsNew.has(row.left.line - 1) ? "theirs" : "mine-removed";
    }
    if (row.right && row.right.kind !== "same") {
      row.right.kind = mineNew.has(row.right.line - 1) ? "mine" : "theirs-removed";
    }
  }
  return rows;
}

const unchanged = (row) => row.left && row.right && row.left.kind === "same";
const whose = (side) => (side && side.kind !== "same" ? (side.kind.startsWith("theirs") ? "them" : "you") : null);

/** The changes (runs of differing rows: {from, to, who}) and what to draw: [{from, to,
 * fold}], row ranges, each change with `context` unchanged rows either side shown and the
 * runs between them folded. `who`: "them", "you" or "both". */
export function layout(rows, context = CONTEXT) {
  const changes = [];
  for (let i = 0; i < rows.length; ) {
    if (unchanged(rows[i])) {
      i++;
      continue;
    }
    const from = i;
    const by = new Set();
    for (; i < rows.length && !unchanged(rows[i]); i++) {
      for (const side of [rows[i].left, rows[i].right]) if (whose(side)) by.add(whose(side));
    }
    changes.push({ from, to: i, who: by.size === 2 ? "both" : [...by][0] });
  }
  const shown = [];
  for (const { from, to } of changes) {
    const start = Math.max(0, from - context);
    const end = Math.min(rows.length, to + context);
    const last = shown[shown.length - 1];
    if (last && start - last.to < MIN_FOLD) last.to = end;
    else shown.push({ from: start, to: end });
  }
  const parts = [];
  let at = 0;
  for (const part of shown) {
    if (part.from - at >= MIN_FOLD) parts.push({ from: at, to: part.from, fold: true });
    else part.from = at;
    parts.push({ ...part, fold: false });
    at = part.to;
  }
  if (rows.length - at >= MIN_FOLD) parts.push({ from: at, to: rows.length, fold: true });
  else if (at < rows.length) {
    if (parts.length) parts[parts.length - 1].to = rows.length;
    else parts.push({ from: 0, to: rows.length, fold: false });
  }
  return { changes, parts };
}

// Said instead of a diff past diff.js's MAX_EDITS: the choices below the view still work.
const TOO_DIFFERENT = "The two versions differ in too many lines to compare line by line here. " +
  "Choose below what to do with your text: re-apply your edits, overwrite, or copy your text.";

const plural = (n, one, many = `${one}s`) => `${number(n)} ${n === 1 ? one : many}`;

/** "line 5" / "lines 5–9" for rows [from, to) of one side (null when that side has none). */
function lineSpan(rows, from, to, side) {
  const lines = rows.slice(from, to).map((row) => row[side]).filter(Boolean).map((s) => s.line);
  if (!lines.length) return null;
  const [first, last] = [lines[0], lines[lines.length - 1]];
  return first === last ? `line ${number(first)}` : `lines ${number(first)}–${number(last)}`;
}

// What is drawn now: redrawn only for another conflict, so that a render (a button turned
// off while a save is out) keeps the folds the user opened and the change they are at.
let drawn = null;

/** Draw conflict `c` (file-state.js): headers, legend, count, the folded rows; false when
 * the two texts differ too much to draw side by side (only the count says so). */
export function drawDiff(c) {
  $("conflict-left-title").textContent = `Saved by ${THEM} · version ${c.version}`;
  $("conflict-right-title").textContent = "Your text (not saved)";
  tools();
  $("conflict-them").textContent = `Someone else's change (version ${c.version})`;
  if (drawn && drawn.c === c && (!drawn.rows || $("conflict-diff").childElementCount)) return Boolean(drawn.rows);
  const rows = conflictRows(c.started, c.content, c.mine);
  for (const id of ["conflict-table", "conflict-legend", "conflict-nav"]) $(id).hidden = !rows;
  if (!rows) {
    drawn = { c, rows, changes: [], at: -1, nodes: new Map() };
    $("conflict-diff").replaceChildren();
    $("conflict-count").textContent = TOO_DIFFERENT;
    $("conflict-at").textContent = "";
    return false;
  }
  const { changes, parts } = layout(rows);
  drawn = { c, rows, changes, at: -1, nodes: new Map() };
  $("conflict-diff").replaceChildren(...parts.map((part) => (part.fold ? foldRow(part) : rowsOf(part))).flat());
  const by = (who) => changes.filter((change) => change.who === who).length;
  const counts = [[by("them"), `by ${THEM}`], [by("you"), "by you"], [by("both"), "by both of you"]]
    .filter(([n]) => n).map(([n, who]) => `${number(n)} ${who}`);
  $("conflict-count").textContent = changes.length
    ? `${plural(changes.length, "change")}: ${counts.join(", ")}. Unchanged lines are folded.`
    : "No line differs.";
  $("conflict-at").textContent = "";
  step(0);
  return true;
}

function rowsOf({ from, to }) {
  const nodes = [];
  for (let i = from; i < to; i++) nodes.push(row(i));
  return nodes;
}

function row(i) {
  const { rows, changes, nodes } = drawn;
  const { left, right } = rows[i];
  const paired = Boolean(left && right);
  const node = el("div", { role: "row", class: "row" }, cell(left, "stored", paired), cell(right, "mine", paired));
  const change = changes.findIndex((ch) => ch.from === i);
  if (change >= 0) nodes.set(change, node);
  return node;
}

function cell(side, which, paired) {
  const kind = side && KINDS[side.kind];
  return el("div", { role: "cell", class: `cell ${side ? kind?.cls || "same" : "empty"}`, "data-side": which },
    el("span", { class: "ln", "aria-hidden": "true" }, side ? side.line : ""),
    el("span", { class: "sign", "aria-hidden": "true" }, kind ? kind.sign : ""),
    kind ? el("span", { class: "mark sr-only" }, `${kind.words(paired)}: `) : null,
    el("span", { class: "tx", dir: "auto" }, side ? side.text : ""));
}

function foldRow(part) {
  const n = part.to - part.from;
  const where = lineSpan(drawn.rows, part.from, part.to, "left");
  const open = el("button", { type: "button", class: "quiet fold-open" },
    `Show ${plural(n, "unchanged line")}`, where ? ` (${where} of version ${drawn.c.version})` : "");
  const node = el("div", { role: "row", class: "row fold" },
    el("div", { role: "cell", "aria-colspan": "2", class: "fold-cell" }, open));
  open.addEventListener("click", () => {
    node.replaceWith(...rowsOf(part));
    $("conflict-table").focus(); // the button is gone: the table, which scrolls by keyboard
  });
  return node;
}

/** Move to the change `by` away from the current one (wrapping), scrolled into view. */
function step(by) {
  const { changes, nodes } = drawn;
  $("conflict-prev").disabled = changes.length < 2;
  $("conflict-next").disabled = changes.length < 2;
  if (!changes.length) return;
  const at = drawn.at < 0 ? 0 : (drawn.at + by + changes.length) % changes.length;
  nodes.get(drawn.at)?.classList.remove("current");
  drawn.at = at;
  const node = nodes.get(at);
  node.classList.add("current");
  const change = changes[at];
  const left = lineSpan(drawn.rows, change.from, change.to, "left");
  const right = lineSpan(drawn.rows, change.from, change.to, "right");
  const who = { them: `by ${THEM}`, you: "by you", both: "by both of you" }[change.who];
  $("conflict-at").textContent = `Change ${number(at + 1)} of ${number(changes.length)}, ${who}: ` +
    [left && `${left} of version ${drawn.c.version}`, right && `${right} of your text`].filter(Boolean).join(", ") + ".";
  if (by) node.scrollIntoView({ block: "center" });
}

// Alt+↑ / Alt+↓ step through the changes from anywhere in the conflict view. Not `[` / `]`
// or a letter: a screen reader in browse mode takes single keys for its own navigation;
// not Ctrl+↑/↓, which move by paragraph in text fields. Alt+↑/↓ move nothing in a page
// (Alt+←/→ are history) and are left alone in text fields, where they move the caret on a Mac.
const PREV_KEY = "Alt+ArrowUp";
const NEXT_KEY = "Alt+ArrowDown";

function stepKeys(event) {
  const by = { ArrowUp: -1, ArrowDown: 1 }[event.key];
  if (!by || !event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
  const inView = $("conflict").contains(document.activeElement) || document.activeElement === document.body;
  if (!drawn || $("conflict").hidden || !inView) return;
  if (event.target.closest?.("textarea, input, select, [contenteditable]")) return;
  event.preventDefault();
  step(by);
}

/** The legend, the count and Previous/Next, made once above the table. */
function tools() {
  if ($("conflict-tools")) return;
  const swatch = (cls, sign) => el("span", { class: `swatch ${cls}`, "aria-hidden": "true" }, sign);
  const prev = el("button", { type: "button", id: "conflict-prev", "aria-keyshortcuts": PREV_KEY,
    title: "Alt+↑" }, "Previous change");
  const next = el("button", { type: "button", id: "conflict-next", "aria-keyshortcuts": NEXT_KEY,
    title: "Alt+↓" }, "Next change");
  prev.addEventListener("click", () => step(-1));
  next.addEventListener("click", () => step(1));
  document.addEventListener("keydown", stepKeys);
  $("conflict-table").before(el("div", { id: "conflict-tools", class: "diff-tools" },
    el("ul", { id: "conflict-legend", class: "diff-legend", "aria-label": "Legend" },
      el("li", {}, swatch("by-them", "+"), el("span", { id: "conflict-them" })),
      el("li", {}, swatch("by-you", "+"), "Your change"),
      el("li", {}, "+ added or changed, − removed (shown on the side that still has it)")),
    el("p", { id: "conflict-count", class: "diff-count" }),
    el("div", { id: "conflict-nav", class: "diff-nav" }, prev, next,
      el("span", { id: "conflict-at", class: "diff-at", role: "status" }))));
}

/** What overwriting conflict `c` loses: the lines the other writer added or changed
 * (`added`, and the first of them: `first`, a row side) and how many lines they removed
 * that the user's text brings back (`removed`); null when the texts differ too much to say. */
export function theirEdits(c) {
  const rows = drawn && drawn.c === c ? drawn.rows : conflictRows(c.started, c.content, c.mine);
  if (!rows) return null;
  const added = rows.map((row) => row.left).filter((side) => side && side.kind === "theirs");
  const removed = rows.filter((row) => row.right && row.right.kind === "theirs-removed").length;
  return { added: added.length, first: added[0] || null, removed };
}

/** "line 5" / "lines 5–9" for line indices [from, to); an empty range is the place between
 * lines: "at line 5". */
export const lines = ([from, to]) => {
  if (to - from <= 1) return `line ${number(from + 1)}`;
  return `lines ${number(from + 1)}–${number(to)}`;
};
