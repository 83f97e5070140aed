// Drawing the files view from `state`: tabs, editor, size meter, status, the set-aside text
// and the conflict diff. Nothing here changes a file or talks to the server, so every
// path that does (load, save, conflict) can call `render` afterwards.

import { diffLines, sideBySide, splitLines } from "./diff.js";
import { $, banner, bytes, el, number } from "./dom.js";
import { canSave, current, dirty, setAside, size, state, storedText } from "./file-state.js";

// The message line always holds something, so a message never pushes the editor down.
const HINT = "Ctrl+S saves. Saving checks the version you started from: nobody's edit is overwritten silently.";

export function say(text, kind = "info") {
  banner($("file-message"), text || HINT, text ? kind : "quiet");
}

export function render() {
  const f = current();
  if (!f) return;
  for (const tab of $("file-tabs").children) {
    const name = tab.dataset.name;
    const file = state.files.get(name);
    const selected = name === state.current;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    const unsaved = Boolean(dirty(file) || file.conflict || setAside(file));
    tab.classList.toggle("unsaved", unsaved);
    tab.title = unsaved ? `${file.filename}: unsaved changes` : file.filename;
  }
  $("file-panel").setAttribute("aria-labelledby", `tab-${f.name}`);
  $("editor-label").textContent = `${f.filename} content`;
  const editor = $("editor");
  editor.disabled = !f.loaded;
  if (editor.value !== f.draft) editor.value = f.draft;

  const limit = state.limits.max_content_bytes;
  const used = size(storedText(f, f.conflict ? f.conflict.mine : f.draft));
  $("file-version").textContent = f.version === null ? "version –" : `version ${f.version}`;
  $("file-size").textContent = `${f.loaded ? bytes(used) : "–"} of ${bytes(limit)}`;
  $("file-size").title = `${number(used)} of ${number(limit)} bytes (UTF-8)`;
  $("file-meter").style.width = `${Math.min(100, (100 * used) / limit)}%`;
  $("file-meter").parentElement.classList.toggle("over", used > limit);
  banner($("file-warning"), used > limit
    ? `This text is ${number(used)} bytes, ${number(used - limit)} over the server's limit of ` +
      `${number(limit)} bytes: saving will be refused. Shorten the file first.`
    : "", "warn");

  let status = "Saved";
  if (f.loading && !f.loaded) status = "Loading…";
  else if (!f.loaded) status = "Not loaded";
  else if (state.saving) status = "Saving…";
  else if (f.conflict) status = "Conflict";
  else if (dirty(f)) status = "Unsaved changes";
  else if (setAside(f)) status = "Earlier text not saved";
  $("file-state").textContent = status;
  $("file-state").dataset.state = status.toLowerCase().replace(/[^a-z]+/g, "-");
  $("file-retry").hidden = f.loaded || f.loading;
  $("file-revert").hidden = !$("file-retry").hidden; // Retry takes its place: nothing to revert
  $("file-save").disabled = !canSave(f);
  $("file-revert").disabled = !dirty(f) || state.saving || Boolean(f.conflict);

  $("kept").hidden = f.kept === null;
  $("kept-title").textContent = f.keptPending
    ? "Your earlier text (not saved)"
    : "Your earlier text (for reference)";
  if (f.kept !== null && $("kept-text").value !== f.kept) $("kept-text").value = f.kept;
  $("editor-wrap").classList.toggle("with-kept", f.kept !== null);
  $("editor-wrap").hidden = Boolean(f.conflict);
  renderConflict(f);
}

function renderConflict(f) {
  const box = $("conflict");
  box.hidden = !f.conflict;
  if (!f.conflict) return;
  const c = f.conflict;
  $("conflict-title").textContent = `${f.filename} changed while you were editing`;
  $("conflict-text").textContent =
    `Someone else saved ${f.filename} — the agent or another tab. You started from version ` +
    `${c.startedVersion}; version ${c.version} is stored now. Your text is kept on the right and ` +
    "nothing is lost until you choose.";
  $("conflict-left-title").textContent = `Stored now · version ${c.version}`;
  $("conflict-right-title").textContent = "Your text (not saved)";
  $("conflict-reapply").textContent = `Reload version ${c.version} and re-apply my edits`;
  $("conflict-overwrite").textContent = `Overwrite version ${c.version} with my text`;
  // one choice at a time: no second re-apply, and no overwrite, while one is out
  $("conflict-reapply").disabled = state.saving || state.merging;
  $("conflict-overwrite").disabled = state.saving || state.merging;
  const theirs = splitLines(c.content);
  const mine = splitLines(c.mine);
  // Colour marks the differing lines for the eye; assistive tech reads a word instead: a
  // line on one side only is "removed" (left) or "added" (right), a pair is "changed".
  const cell = (side, which, paired) => {
    let mark = "";
    if (side && side.kind !== "same") mark = paired ? "changed" : side.kind;
    return el("div", { role: "cell", class: `cell ${side ? side.kind : "empty"}`, "data-side": which },
      el("span", { class: "ln", "aria-hidden": "true" }, side ? side.line : ""),
      mark ? el("span", { class: "mark sr-only" }, `${mark}: `) : null,
      el("span", { class: "tx", dir: "auto" }, side ? side.text : ""));
  };
  const rows = sideBySide(diffLines(theirs, mine), theirs, mine).map((row) => {
    const paired = Boolean(row.left && row.right);
    return el("div", { role: "row", class: "row" },
      cell(row.left, "stored", paired), cell(row.right, "mine", paired));
  });
  $("conflict-diff").replaceChildren(...rows);
}
