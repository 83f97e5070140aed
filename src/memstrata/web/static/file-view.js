// Drawing the files view from `state`: tabs, editor, size meter, status, the set-aside text,
// the conflict diff, the places of a re-apply to choose at and a kept draft offered back. Nothing here changes a file or talks to the server, so every
// path that does (load, save, conflict) can call `render` afterwards.

import { drawDiff } from "./conflict-diff.js";
import { $, banner, bytes, number, when } from "./dom.js";
import { schedule } from "./file-drafts.js";
import { drawPlaces } from "./file-resolve.js";
import { canSave, current, dirty, setAside, state, tooLarge, used } from "./file-state.js";

// The message line always holds something, so a message never pushes the editor down: a
// hint when there is nothing to say, one that is true of the file on screen (`hint`).
const HINT = "Ctrl+S saves. Saving checks the version you started from: nobody's edit is overwritten silently.";
const CONFLICT_HINT = "Save is off until you choose below: re-apply your edits, overwrite, or copy your text.";
let hinting = true; // the message line holds the hint (nothing else to say), redrawn by render
let told = "quiet"; // the kind of what the message line says

/** The quiet line for file `f`: never "Ctrl+S saves" while Save is off for a reason the
 * page shows — a conflict, or a text over the limit (the size warning says that already,
 * and what is off, so the line is left empty: one message, not two). */
const hint = (f) => {
  if (f && tooLarge(f)) return "";
  return f && f.conflict ? CONFLICT_HINT : HINT;
};

/** The warning for a text over the limit, the one for Save and a conflict's choices alike
 * (empty under the limit): by how much, in the bytes the size beside the meter then
 * shows, and what is off until it fits. During a conflict the text is not in the editor
 * (it cannot be shortened there), so the way back to it is named. */
function limitWarning(f) {
  if (!tooLarge(f)) return "";
  const over = used(f) - state.limits.max_content_bytes;
  const by = `Too large to save: ${number(over)} ${over === 1 ? "byte" : "bytes"} over the limit.`;
  return f.conflict
    ? `${by} Re-apply and overwrite are off until it fits: edit your text to shorten it, or copy it.`
    : `${by} Shorten the file; Save is off until it fits.`;
}

export function say(text, kind = "info") {
  hinting = !text;
  told = text ? kind : "quiet";
  banner($("file-message"), text || hint(current()), text ? kind : "quiet");
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
    const unsaved = Boolean(dirty(file) || file.conflict || setAside(file) || file.offer);
    tab.classList.toggle("unsaved", unsaved);
    tab.title = unsaved ? `${file.filename}: unsaved changes` : file.filename;
  }
  $("file-panel").setAttribute("aria-labelledby", `tab-${f.name}`);
  $("editor-label").textContent = `${f.filename} content`;
  const editor = $("editor");
  // a kept draft offered back: nothing is typed over the stored text until the user chooses
  editor.disabled = !f.loaded || Boolean(f.offer);
  if (editor.value !== f.draft) editor.value = f.draft;

  const limit = state.limits.max_content_bytes;
  const n = used(f);
  const over = tooLarge(f);
  $("file-version").textContent = f.version === null ? "version –" : `version ${f.version}`;
  // Exact bytes over the limit and wherever KiB rounds to the limit's figure: 10 bytes over
  // or 6 under would both read "64 KiB of 64 KiB". The warning then counts in the same
  // unit, and says only what the size does not.
  $("file-size").textContent = over || (f.loaded && bytes(n) === bytes(limit))
    ? `${number(n)} of ${number(limit)} bytes`
    : `${f.loaded ? bytes(n) : "–"} of ${bytes(limit)}`;
  $("file-size").title = `${number(n)} of ${number(limit)} bytes (UTF-8)`;
  $("file-meter").style.width = `${Math.min(100, (100 * n) / limit)}%`;
  $("file-meter").parentElement.classList.toggle("over", over);
  // during a conflict the warning is in the conflict view, beside the choices it turns off
  const warning = f.conflict ? "" : limitWarning(f);
  banner($("file-warning"), warning, "warn");
  // One state at a time: a past save's "Saved … as version 2." does not stay beside "Too
  // large to save"; a note, an error or a warning ("Your text is back in the editor.
  // Shorten it…") still has something to say about it.
  if (warning && told === "ok") say("");
  // only when it changes: the line is a live region, re-announced on every replacement
  if (hinting && $("file-message").textContent !== hint(f)) banner($("file-message"), hint(f), "quiet");

  let status = "Saved";
  if (f.loading && !f.loaded) status = "Loading…";
  else if (!f.loaded) status = "Not loaded";
  else if (state.saving) status = "Saving…";
  else if (f.checking) status = "Checking save…";
  else if (f.conflict) status = "Conflict";
  else if (dirty(f)) status = "Unsaved changes";
  else if (setAside(f)) status = "Earlier text not saved";
  else if (f.offer) status = "Kept changes not restored";
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
  $("editor-wrap").hidden = Boolean(f.conflict || f.resolve);
  renderConflict(f);
  $("resolve").hidden = !f.resolve;
  if (f.resolve) drawPlaces(f, render);
  renderOffer(f);
  schedule(); // what is unsaved now is kept across a reload (file-drafts.js)
}

function renderOffer(f) {
  $("draft-offer").hidden = !f.offer;
  if (!f.offer) return;
  const at = when(f.offer.at);
  $("draft-offer-text").textContent = `You have unsaved changes to ${f.filename} from ${at.text}. ` +
    "Restore them?";
  $("draft-offer-text").title = at.title;
}

function renderConflict(f) {
  const box = $("conflict");
  box.hidden = !f.conflict;
  if (!f.conflict) return;
  const c = f.conflict;
  $("conflict-title").textContent = `${f.filename} changed while you were editing`;

  $("conflict-reapply").textContent = `Reload version ${c.version} and re-apply my edits`;
  $("conflict-overwrite").textContent = `Overwrite version ${c.version} with my text`;
  // one choice at a time: no second re-apply, and no overwrite, while one is out; and
  // Save's rule: over the limit the server would refuse either (413), so the text goes back
  // to the editor to be shortened instead, and the warning says so beside them
  const off = state.saving || state.merging || tooLarge(f);
  $("conflict-reapply").disabled = off;
  $("conflict-overwrite").disabled = off;
  $("conflict-shorten").hidden = !tooLarge(f);
  banner($("conflict-limit"), limitWarning(f), "warn");
  // headers, legend, whose change each line is, folds (conflict-diff.js)
  const where = drawDiff(c) ? " on the right" : "";
  $("conflict-text").textContent =
    `Someone else saved ${f.filename} — the agent or another tab. You started from version ` +
    `${c.startedVersion}; version ${c.version} is stored now. Your text is kept${where} and ` +
    "nothing is lost until you choose.";
}
