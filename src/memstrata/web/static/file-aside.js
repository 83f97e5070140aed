// The agents' edits that sync kept aside (GET/DELETE api/memory/conflicts): when an agent's
// edit of a file conflicted with the user's (the user's version was kept) or could not be
// stored, its text waits in the agent's workspace. A notice near the file's editor says so,
// with View (the text, read-only) and Dismiss (the copy is deleted). Without it, the agent's
// edit would simply be gone as far as the user can tell.

import { api, reason } from "./api.js";
import { $, banner, bdi, bytes, el, isolated } from "./dom.js";
import { current } from "./file-state.js";

// Copies shown per file at first; "Show more" fetches the next ones.
const FIRST = 5;
const BASE = "api/memory/conflicts";
const copyPath = (name) => `${BASE}/${encodeURIComponent(name)}`;

// Per file name: {copies, total, next, warnings, error, ticket, nodes}. Kept apart from the
// file's own state: nothing here is a draft, and nothing here changes a file. The latest
// read of a file's list wins (`ticket`): an older answer is dropped. `nodes`: each copy's
// notice by name, kept across reads, so that a text opened with View stays open.
const lists = new Map();
let ticket = 0;

const listOf = (name) => {
  if (!lists.has(name)) {
    lists.set(name, {
      copies: [], total: 0, next: null, warnings: [], error: null, ticket: 0, nodes: new Map(),
    });
  }
  return lists.get(name);
};

/** Read the copies of the current file (again), then draw them. */
export async function refresh(f = current(), offset = 0) {
  if (!f) return;
  const list = listOf(f.name);
  const mine = ++ticket;
  list.ticket = mine;
  let data;
  try {
    const query = `file=${encodeURIComponent(f.name)}&offset=${offset}&limit=${FIRST}`;
    ({ data } = await api("GET", `${BASE}?${query}`));
  } catch (error) {
    if (list.ticket !== mine) return;
    if (error.status === 401) return; // signed out already (api.js)
    list.error = error;
    draw();
    return;
  }
  if (list.ticket !== mine) return; // a newer read (or a sign-out) came meanwhile
  list.copies = offset ? [...list.copies, ...data.conflicts] : data.conflicts;
  list.total = data.total ?? list.copies.length;
  list.next = data.next_offset;
  list.warnings = data.warnings;
  list.error = null;
  draw();
}

/** Sign-out: nothing of this user's copies stays in the page. */
export function reset() {
  ticket += 1;
  lists.clear();
  $("aside-list").replaceChildren();
  $("aside").hidden = true;
}

/** Draw the current file's notices. */
export function draw() {
  const f = current();
  const list = f ? listOf(f.name) : null;
  const box = $("aside");
  if (!list) {
    box.hidden = true;
    return;
  }
  const names = new Set(list.copies.map((copy) => copy.name));
  for (const name of list.nodes.keys()) if (!names.has(name)) list.nodes.delete(name);
  for (const copy of list.copies) {
    if (!list.nodes.has(copy.name)) list.nodes.set(copy.name, notice(f, copy));
  }
  $("aside-list").replaceChildren(...list.copies.map((copy) => list.nodes.get(copy.name)));
  const more = list.next === null ? 0 : list.total - list.copies.length;
  $("aside-more").hidden = more <= 0;
  $("aside-more").textContent = `Show ${more} more kept-aside ${more === 1 ? "edit" : "edits"}`;
  let problem = "";
  if (list.error) {
    problem = [`Could not check for kept-aside edits of ${f.filename}. `, ...reason(list.error)];
  } else if (list.warnings.length) {
    problem = [`Could not check for all kept-aside edits of ${f.filename}: `,
      ...list.warnings.map((w) => bdi(w)), "."];
  }
  banner($("aside-problem"), problem, "warn");
  box.hidden = !list.copies.length && !problem;
}

const cause = (copy) => (copy.reason === "rejected"
  ? "the server could not store it (too large, or not text)"
  : "it conflicted with yours");

function notice(f, copy) {
  const date = new Date(copy.saved_at);
  const time = el("time", { datetime: copy.saved_at, title: copy.saved_at }, date.toLocaleString());
  const where = copy.session_dir === null ? "" : " in one of its sessions";
  const size = copy.size_bytes === null ? "" : ` (${bytes(copy.size_bytes)})`;
  const label = `View${size}`;
  const view = el("button", { type: "button", class: "quiet", "aria-expanded": "false" }, label);
  const dismiss = el("button", { type: "button", class: "quiet" }, "Dismiss");
  const text = el("pre", { class: "aside-text", dir: "auto", tabindex: "0", hidden: true });
  const note = el("p", { class: "aside-note", hidden: true });
  // one row: the sentence, then its buttons (below it on a narrow screen)
  const item = el("li", { class: "aside-item", "data-name": copy.name },
    el("p", { class: "aside-says" }, `An agent's edit of ${copy.filename}${where} from `, time,
      ` was kept aside because ${cause(copy)}.`),
    el("div", { class: "aside-actions" }, view, dismiss),
    note, text);
  view.addEventListener("click", () => toggle(copy, view, label, text, note));
  dismiss.addEventListener("click", () => drop(f, copy, dismiss, note, date));
  return item;
}

async function toggle(copy, view, label, text, note) {
  if (!text.hidden) {
    text.hidden = true;
    view.textContent = label;
    view.setAttribute("aria-expanded", "false");
    return;
  }
  view.disabled = true;
  try {
    const { data } = await api("GET", copyPath(copy.name));
    text.textContent = data.content; // as text, never as HTML
    text.hidden = false;
    view.textContent = "Hide";
    view.setAttribute("aria-expanded", "true");
    banner(note, data.undecodable
      ? "This text is not UTF-8: each byte that does not decode shows as \ufffd." : "", "info");
  } catch (error) {
    if (error.status === 401) return;
    banner(note, ["Could not load this edit. ", ...reason(error)], "error");
  } finally {
    view.disabled = false;
  }
}

async function drop(f, copy, button, note, date) {
  // the text is deleted for good: ask, as Revert does (plain text in a dialog: isolated)
  if (!confirm(`Dismiss the agent's kept-aside edit of ${isolated(copy.filename)} from ` +
    `${date.toLocaleString()}? Its text is deleted.`)) return;
  button.disabled = true;
  try {
    await api("DELETE", copyPath(copy.name));
  } catch (error) {
    button.disabled = false;
    if (error.status === 401) return;
    if (error.status !== 404) {
      banner(note, ["Could not dismiss this edit. ", ...reason(error)], "error");
      return;
    }
    // dismissed elsewhere meanwhile (another tab): gone either way
  }
  const list = listOf(f.name);
  list.copies = list.copies.filter((c) => c.name !== copy.name);
  list.total = Math.max(0, list.total - 1);
  if (list.next !== null) list.next = Math.max(0, list.next - 1);
  if (f !== current()) return; // drawn when its tab is selected again
  draw();
  // the button is gone with its notice: focus the next notice, or the editor
  ($("aside-list").querySelector(".aside-item button") || $("editor")).focus();
}

export function wire() {
  $("aside-more").addEventListener("click", () => {
    const f = current();
    const list = f && listOf(f.name);
    if (list && list.next !== null) refresh(f, list.next);
  });
}
