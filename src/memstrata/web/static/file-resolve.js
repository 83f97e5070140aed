// The places a re-apply could not merge, one by one: the server's merge answers the text
// region by region (POST web/merge `parts`: lines it merged, and each place both edits
// change, with its exact lines in both texts), and the user chooses at each place the other
// version's lines, their own, both, or words of their own. Nothing is guessed and nothing
// is lost: the user's whole text stays beside the result (`f.kept`) until the file is saved,
// and the result goes to the editor to check before Save (If-Match the version merged onto).

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

/** Start choosing: `parts` from the server, onto version `version`. */
export function begin(f, version, parts) {
  const places = parts.filter((part) => part.conflict).map((part) => part.conflict);
  f.resolve = { version, parts, places, chosen: places.map(() => null), written: places.map(() => null) };
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
  return el("li", { class: "place", "aria-labelledby": `${id}-title` },
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
