// The places a re-apply could not merge, one by one: the server's merge answers the text
// region by region (POST web/merge `parts`: lines it merged, and each place both edits
// change, with its exact lines in both texts), and the user chooses at each place the other
// version's lines, their own, both, or words of their own. Nothing is guessed and nothing
// is lost: the user's whole text stays beside the result (`f.kept`) until the file is saved,
// and the result goes to the editor to check before Save (If-Match the version merged onto).
// The choices are kept with the user's set-aside text across a reload (file-drafts.js) and
// come back when a re-apply meets the same places again (`begin`'s `kept`). Previous/Next
// place (and Alt+↑/↓, as for the conflict view's changes) move the focus place to place.

import { lines } from "./conflict-diff.js";
import { $, el, number } from "./dom.js";

// Merged lines shown above and below each place.
const CONTEXT = 3;
const CHOICES = [
  ["theirs", (v) => `Keep version ${v}'s lines`],
  ["mine", () => "Keep your lines"],
  ["both", (v) => `Keep both, version ${v}'s first`],
  ["edit", () => "Write it myself"],
];

const VALUES = new Set(CHOICES.map(([value]) => value));

/** Start choosing: `parts` from the server, onto version `version`; `kept` (the choices kept
 * before a reload: {version, chosen, written}) is taken when it was made at these places,
 * the same version's. Returns how many places it chose. */
export function begin(f, version, parts, kept = null) {
  const places = parts.filter((part) => part.conflict).map((part) => part.conflict);
  f.resolve = {
    version, parts, places, chosen: places.map(() => null), written: places.map(() => null), at: 0,
  };
  if (!fits(kept, version, places.length)) return 0;
  f.resolve.chosen = [...kept.chosen];
  f.resolve.written = [...kept.written];
  return kept.chosen.filter(Boolean).length;
}

/** Kept choices that fit: localStorage is the browser's, read back as whatever it holds. */
function fits(kept, version, n) {
  if (!kept || kept.version !== version) return false;
  const { chosen, written } = kept;
  return Array.isArray(chosen) && Array.isArray(written) && chosen.length === n && written.length === n &&
    chosen.every((c) => c === null || VALUES.has(c)) &&
    written.every((w, i) => (w === null ? chosen[i] !== "edit" : typeof w === "string"));
}

/** The lines a place's choice stands for. */
function linesOf(place, choice, written) {
  if (choice === "theirs") return place.theirs_lines;
  if (choice === "mine") return place.mine_lines;
  if (choice === "both") return [...place.theirs_lines, ...place.mine_lines];
  return written === "" ? [] : written.split("\n"); // an emptied box: no lines
}

let drawn = null; // the resolve state drawn, so a render keeps the radios and boxes as they are

/** Draw `f.resolve` (render calls it while it is set); `changed` after a choice. */
export function drawPlaces(f, changed) {
  const r = f.resolve;
  const n = r.places.length;
  $("resolve-title").textContent = `Choose what to keep at ${n === 1 ? "the place" : `${number(n)} places`} ` +
    "where both edits meet";
  if (drawn !== r) {
    drawn = r;
    let k = 0;
    const items = [];
    r.parts.forEach((part, at) => {
      if (part.conflict) items.push(place(r, k++, at, changed));
    });
    $("resolve-list").replaceChildren(...items);
  }
  const chosen = r.chosen.filter(Boolean).length;
  $("resolve-status").textContent = `${number(chosen)} of ${number(n)} ${n === 1 ? "place" : "places"} chosen.`;
  $("resolve-apply").disabled = chosen < n;
  $("place-nav").hidden = n < 2; // one place: nowhere to step to
  $("place-prev").disabled = r.at <= 0;
  $("place-next").disabled = r.at >= n - 1;
}

/** Move the focus to the place `by` away from the one the user is at (not past the ends). */
function step(f, by) {
  const r = f?.resolve;
  if (!r) return;
  const at = r.at + by;
  if (at < 0 || at >= r.places.length) return;
  const node = $(`place-${at}`);
  node.focus({ preventScroll: true });
  node.scrollIntoView({ block: "start" }); // below the stuck bars: scroll-margin, conflict.css
}

/** Previous/Next place, and Alt+↑/↓ from anywhere in the places but a text box (where they
 * move the caret on a Mac), as the conflict view's changes (conflict-diff.js) take them. */
export function wire(current, changed) {
  $("place-prev").addEventListener("click", () => step(current(), -1));
  $("place-next").addEventListener("click", () => step(current(), 1));
  document.addEventListener("keydown", (event) => {
    const by = { ArrowUp: -1, ArrowDown: 1 }[event.key];
    if (!by || !event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    if ($("resolve").hidden || !$("resolve").contains(document.activeElement)) return;
    if (event.target.closest?.("textarea")) return;
    event.preventDefault();
    step(current(), by);
  });
  // where the focus is (a step, Tab, a click on a choice) is the place the next step is from
  $("resolve-list").addEventListener("focusin", (event) => {
    const r = current()?.resolve;
    const node = event.target.closest("li.place");
    if (!r || !node) return;
    r.at = Number(node.dataset.place);
    changed();
  });
}

function place(r, i, at, changed) {
  const p = r.places[i];
  const v = r.version;
  const id = `place-${i}`;
  const before = r.parts[at - 1]?.lines?.slice(-CONTEXT) ?? [];
  const after = r.parts[at + 1]?.lines?.slice(0, CONTEXT) ?? [];
  const box = el("textarea", { class: "place-edit", dir: "auto", spellcheck: "false", "aria-label": `Your words for place ${i + 1}` });
  box.hidden = r.chosen[i] !== "edit";
  if (r.written[i] !== null) box.value = r.written[i];
  box.addEventListener("input", () => {
    r.written[i] = box.value;
    changed(); // kept as typed (file-drafts.js), as the editor's text is
  });
  const radios = CHOICES.map(([value, label]) => {
    const input = el("input", { type: "radio", name: id, value, id: `${id}-${value}` });
    input.checked = r.chosen[i] === value;
    input.addEventListener("change", () => {
      r.chosen[i] = value;
      if (value === "edit" && r.written[i] === null) {
        r.written[i] = [...p.theirs_lines, ...p.mine_lines].join("\n"); // both, to start from
        box.value = r.written[i];
      }
      box.hidden = value !== "edit";
      changed();
    });
    return el("label", { for: `${id}-${value}` }, input, label(v));
  });
  const side = (cls, title, text) => el("div", { class: `place-side ${cls}` },
    el("p", { class: "place-head" }, title),
    text.length ? text.map(lineOf) : el("p", { class: "place-none" }, "(no lines)"));
  // focusable (not a tab stop): Previous/Next move the focus to the place itself
  return el("li", { class: "place", id, tabindex: "-1", "data-place": i, "aria-labelledby": `${id}-title` },
    el("h3", { id: `${id}-title` }, `Place ${number(i + 1)} of ${number(r.places.length)}: ` +
      `${lines(p.theirs)} of version ${v}, ${lines(p.mine)} of your text`),
    el("div", { class: "place-before" }, before.map(lineOf)),
    el("div", { class: "place-sides" },
      side("place-theirs", `Version ${v} (someone else)`, p.theirs_lines),
      side("place-mine", "Your text", p.mine_lines)),
    el("div", { class: "place-after" }, after.map(lineOf)),
    el("fieldset", { class: "place-choice" }, el("legend", {}, "Keep"), radios),
    box);
}

const lineOf = (text) => el("div", { class: "place-line", dir: "auto" }, text);

/** The text with every place chosen (`r.chosen` all set), and the lines of the first place
 * in it ([from, to)), to show it. */
export function assemble(r) {
  const out = [];
  let first = null;
  let k = 0;
  for (const part of r.parts) {
    if (!part.conflict) {
      out.push(...part.lines);
      continue;
    }
    const chosen = linesOf(part.conflict, r.chosen[k], r.written[k]);
    if (first === null) first = [out.length, out.length + chosen.length];
    out.push(...chosen);
    k += 1;
  }
  return { text: out.join("\n"), first };
}

/** Scroll text box `area` to lines [from, to) (a third down the box), selecting them if
 * `select`. The height above them is measured, not counted in lines: lines wrap. */
export function reveal(area, [from, to], select) {
  const text = area.value;
  const all = text.split("\n");
  const start = all.slice(0, from).reduce((n, line) => n + line.length + 1, 0);
  const end = start + Math.max(0, all.slice(from, to).join("\n").length);
  area.value = text.slice(0, start);
  const above = area.scrollHeight;
  area.value = text;
  if (select) area.setSelectionRange(start, end);
  area.scrollTop = Math.max(0, above - area.clientHeight / 3);
}
