// A 409 and what the user can do about it: the stored version is fetched and shown beside
// the user's text, which is kept in `f.conflict.mine` (not the editor) until they choose
// to re-apply their edits, overwrite (a save, in file-save.js) or copy their text.

import { api, reason } from "./api.js";
import { merge3, splitLines } from "./diff.js";
import { $ } from "./dom.js";
import { current, editorText, eolOf, path } from "./file-state.js";
import { render, say } from "./file-view.js";

/** 409: fetch what is stored now (unless a read-back already has) and show it beside the
 * user's text (read once the answer is in: the user may have typed on while the save and
 * this fetch were in flight). */
export async function conflict(f, stored = null) {
  try {
    if (!stored) ({ data: stored } = await api("GET", path(f)));
  } catch (failure) {
    say(
      `${f.filename} was not saved: it was changed elsewhere, and loading the newer version failed. ` +
      `${reason(failure)} Your text is still in the editor; save again to compare.`, "error");
    return;
  }
  const mine = f.conflict ? f.conflict.mine : f.draft;
  // the texts in the editor's form (LF); whichever is saved next takes the line endings of
  // the file as it is stored now
  const content = editorText(stored.content);
  f.eol = eolOf(stored.content);
  f.conflict = { mine, started: f.base, startedVersion: f.version, content, version: stored.version };
  if (f === current()) {
    say("");
    render();
    $("conflict-reapply").focus();
  } else {
    // saved from a tab the user has since left: the conflict view is out of sight
    say(
      `${f.filename} was not saved: it was changed elsewhere meanwhile. Open the ${f.filename} tab ` +
      "to compare both versions and choose which to keep.", "warn");
  }
}

export function reapply() {
  const f = current();
  const c = f.conflict;
  const merged = merge3(splitLines(c.started), splitLines(c.mine), splitLines(c.content));
  f.base = c.content;
  f.version = c.version;
  f.kept = c.mine;
  f.keptPending = true;
  f.conflict = null;
  if (merged === null) {
    f.draft = c.content;
    say(
      `Your edits and version ${c.version} change the same lines, so they were not re-applied ` +
      "automatically. Your text is on the side: copy what you need into the editor, then save.", "warn");
  } else {
    f.draft = merged.join("\n");
    say(
      `Your edits were re-applied on top of version ${c.version}. Check the result, then save. ` +
      "Your text as you left it is on the side.", "ok");
  }
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
