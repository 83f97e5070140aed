// A 409 and what the user can do about it: the stored version is fetched and shown beside
// the user's text, which is kept in `f.conflict.mine` (not the editor) until they choose
// to re-apply their edits, overwrite (a save, in file-save.js, after a question naming the
// other writer's lines it discards) or copy their text — or,
// while their text is over the size limit (neither could be sent), take it back to the
// editor to shorten it.
// Re-applying is the server's three-way merge (POST web/merge, the rule the sandbox sync
// uses too): the page has no merge of its own to disagree with it. Where the merge gives up,
// the server names each place and the user chooses there (file-resolve.js).

import { api, reason } from "./api.js";
import { lines, theirEdits } from "./conflict-diff.js";
import { $, isolated, number } from "./dom.js";
import {
  blank, current, editorText, eolOf, holdsMine, path, state, tooLarge,
} from "./file-state.js";
import { assemble, begin, reveal } from "./file-resolve.js";
import { render, say } from "./file-view.js";

/** 409: fetch what is stored now (unless a read-back already has) and show it beside the
 * user's text (read once the answer is in: the user may have typed on while the save and
 * this fetch were in flight). */
export async function conflict(f, stored = null) {
  try {
    if (!stored) ({ data: stored } = await api("GET", path(f)));
  } catch (failure) {
    say([
      `${f.filename} was not saved: it was changed elsewhere, and loading the newer version failed. `,
      ...reason(failure), " Your text is still in the editor; save again to compare."], "error");
    return;
  }
  const mine = f.conflict ? f.conflict.mine : f.draft;
  // the texts in the editor's form (LF); whichever is saved next takes the line endings of
  // the file as it is stored now
  const content = editorText(stored.content);
  f.eol = eolOf(stored.content);
  if (holdsMine(f, stored)) {
    // What is stored is the user's text already (an earlier save of theirs landed after its
    // answer was lost, or another writer wrote the same): nothing to choose between.
    Object.assign(f, { base: content, stored: stored.content, version: stored.version });
    Object.assign(f, { draft: mine, conflict: null, keptPending: false });
    if (f === current()) {
      say(`${f.filename} already holds your text: version ${stored.version}.`, "info");
      render();
    }
    return;
  }
  f.conflict = {
    mine, started: f.base, startedVersion: f.version, content, version: stored.version,
    stored: stored.content,
  };
  if (f === current()) {
    say("");
    render();
    // the first choice that can be made (over the limit, re-apply and overwrite are off)
    $(tooLarge(f) ? "conflict-shorten" : "conflict-reapply").focus();
  } else {
    // saved from a tab the user has since left: the conflict view is out of sight
    say(
      `${f.filename} was not saved: it was changed elsewhere meanwhile. Open the ${f.filename} tab ` +
      "to compare both versions and choose which to keep.", "warn");
  }
}

/** "Reload and re-apply": the server merges the user's edits (from the version they started
 * from to their text) onto the stored version. The texts go in the editor's form (LF); the
 * merged text is saved, like any draft, in the file's own line endings. */
export async function reapply() {
  const f = current();
  const c = f.conflict;
  if (!c || state.merging || state.saving || tooLarge(f)) return;
  state.merging = true; // the conflict's buttons are disabled until the answer is in
  say(`Re-applying your edits on top of version ${c.version}…`, "info");
  render();
  let merged;
  let parts;
  let failure = null;
  try {
    ({ data: { merged, parts } } = await api("POST", "web/merge", {
      body: { base: c.started, mine: c.mine, theirs: c.content },
    }));
  } catch (error) {
    failure = error;
  }
  state.merging = false;
  render();
  if (failure) {
    if (f.conflict !== c || f !== current()) return;
    if (failure.status === 401) {
      say(""); // signed out already (api.js): the conflict view waits for the next sign-in
      return;
    }
    say(["Your edits were not re-applied. ", ...mergeError(failure), " Your text is still beside " +
      `version ${c.version}: re-apply again, overwrite, or copy your text.`], "error");
    $("conflict-reapply").focus(); // it was disabled while waiting: focus fell to the page
    return;
  }
  if (f.conflict !== c) return; // resolved meanwhile
  f.base = c.content;
  f.stored = c.stored;
  f.version = c.version;
  f.kept = c.mine;
  f.keptPending = true;
  // what the set-aside text was based on, to keep it across a reload (file-drafts.js)
  f.keptFrom = { base: c.started, version: c.startedVersion };
  f.conflict = null;
  // the answer may come after the user opened another file's tab: say which file it was
  const which = f === current() ? "" : `${f.filename}: `;
  if (merged === null) {
    f.draft = c.content;
    const back = begin(f, c.version, parts, c.places);
    const n = f.resolve.places.length;
    const many = n > 1 ? ` in ${number(n)} places, so those were` : ", so they were";
    say(
      // the server's rule: edits on neighbouring lines conflict too (sandbox/merge.py)
      `${which}Your edits and version ${c.version} change the same or neighbouring lines` +
      `${many} not re-applied automatically${where(f.resolve.places, c.version)}. Choose what ` +
      `to keep ${n > 1 ? "at each place" : "there"} below; the rest of your edits were re-applied.` +
      (back ? ` Your choices at ${number(back)} of ${number(n)} ${n > 1 ? "places" : "place"} from ` +
        "before are back." : ""),
      "warn");
  } else {
    f.draft = merged;
    // Each text was within the limit (the server checks each), but both sides' additions
    // together may not be: Save is then off, and the message says why rather than "save".
    const fits = !tooLarge(f);
    say(
      `${which}Your edits were re-applied on top of version ${c.version}` +
      (fits ? ". Check the result, then save." : "; together they are too large to save. " +
        "Shorten the result, then save.") +
      " Your text as you left it is on the side.", fits ? "ok" : "warn");
  }
  render();
  if (f !== current()) return;
  // the first choice of the first place, or the merged text
  if (f.resolve) $("place-0-theirs").focus();
  else $("editor").focus();
}

/** "Use these choices": the text with each place chosen goes to the editor, to check and
 * save (on the version merged onto: `f.version`), the first place selected. */
export function applyChoices() {
  const f = current();
  const r = f.resolve;
  if (!r || r.chosen.some((choice) => !choice)) return;
  const { text, first } = assemble(r);
  f.draft = text;
  f.resolve = null;
  say(`Your choices were applied on top of version ${r.version}. Check the result, then save. ` +
    "Your text as you left it is on the side.", "ok");
  render();
  $("editor").focus();
  reveal($("editor"), first, true);
}

/** "Edit version N myself instead": the stored version in the editor, the user's text on
 * the side to copy from. */
export function leavePlaces() {
  const f = current();
  const r = f.resolve;
  if (!r) return;
  f.resolve = null;
  say(`Version ${r.version} is in the editor and your text is on the side: copy what you need ` +
    "into the editor, then save.", "info");
  render();
  $("editor").focus();
}

/** ": at line 5 of version 3 (line 6 of your text), and 2 other places" ("" for none). */
function where(places, version) {
  if (!places.length) return "";
  const more = places.length - 1;
  const others = more ? `, and ${number(more)} other ${more === 1 ? "place" : "places"}` : "";
  return `: ${lines(places[0].theirs)} of version ${version} (${lines(places[0].mine)} of your ` +
    `text)${others}`;
}

/** "Overwrite": the other writer's version is replaced, with no undo. Ask first, as Revert
 * does, naming what goes: their added or changed lines (and the first of them), the lines
 * they removed that come back; a blank text empties the file (the one question for it). */
export function overwriteConfirmed(f) {
  const c = f.conflict;
  // nothing to ask while the overwrite could not be sent (write's rule, file-save.js)
  if (!c || state.saving || state.merging || tooLarge(f)) return false;
  const edits = theirEdits(c);
  const { added, first, removed } = edits ?? {};
  const lost = edits ? [] : ["whatever they changed is lost"];
  if (added) {
    const start = first.text.length > 60 ? `${first.text.slice(0, 60)}…` : first.text;
    lost.push(`the ${number(added)} ${added === 1 ? "line" : "lines"} they added or changed ` +
      `(from line ${number(first.line)}: “${isolated(start)}”) ${added === 1 ? "is" : "are"} lost`);
  }
  if (removed) {
    lost.push(`the ${number(removed)} ${removed === 1 ? "line" : "lines"} they removed ` +
      `${removed === 1 ? "comes" : "come"} back`);
  }
  const what = lost.length ? `: ${lost.join(", and ")}` : "";
  const empties = blank(c.mine) && !blank(c.content) ? " Your text is blank: the file is emptied." : "";
  const asked = `Overwrite ${isolated(f.filename)} with your text? Version ${c.version}, saved ` +
    `by someone else, is replaced${what}.${empties} There is no undo; to keep both, cancel and ` +
    "re-apply your edits.";
  if (confirm(asked)) return true;
  say(`Not overwritten: version ${c.version} stays as it is. Your text is still beside it.`, "info");
  return false;
}

// The server's 413 names its settings; the user gets a sentence about their text.
const mergeError = (error) =>
  error.status === 413 ? ["The texts are too large to merge on the server."] : reason(error);

/** "Edit my text to shorten it" (offered while the text is over the limit): the text goes
 * back to the editor, still on the version the user started from (`f.version`, `f.base`),
 * so saving it meets the newer version again and shows this conflict afresh, with its
 * choices. Nothing is written. The file's line endings stay those of the version stored
 * now (`conflict` set them): any save of this text lands on it, so the size counts them. */
export function editMine() {
  const f = current();
  const c = f.conflict;
  if (!c || state.saving || state.merging) return;
  f.draft = c.mine;
  f.conflict = null;
  say(`Your text is back in the editor. Shorten it, then save: version ${c.version} is shown ` +
    "beside it again, to re-apply your edits or overwrite.", "info");
  render();
  $("editor").focus();
}

export async function copyMine() {
  const c = current().conflict;
  try {
    await navigator.clipboard.writeText(c.mine);
    say("Your text is on the clipboard.", "ok");
  } catch {
    say("The browser did not allow copying; select the right column and copy it.", "warn");
  }
}
