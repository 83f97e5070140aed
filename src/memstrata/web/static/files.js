// The memory files view: SOUL / USER / MEMORY tabs, an editor, save with If-Match, and the
// conflict view on 409. The user's text lives in `draft` until the server has it; no path
// (conflict, error, expired token) replaces a draft without keeping it visible.
// Only this module is app.js's; the rest is split so each part reads on its own, with the
// shared state in file-state.js so that no two modules import each other: drawing in
// file-view.js, saving in file-save.js, the conflict choices in file-conflict.js, the
// agent's kept-aside edits in file-aside.js.

import { api, reason } from "./api.js";
import { $, el } from "./dom.js";
import * as aside from "./file-aside.js";
import * as drafts from "./file-drafts.js";
import {
  applyChoices, conflict, copyMine, editMine, leavePlaces, overwriteConfirmed, reapply,
} from "./file-conflict.js";
import * as places from "./file-resolve.js";
import { cancelCheck, checkingNote, settle, write } from "./file-save.js";
import {
  blank, canSave, current, dirty, editorText, eolOf, holdsMine, path, setAside, state,
} from "./file-state.js";
import { render, say } from "./file-view.js";

/** After sign-in: build the tabs from the server's list of files and load them. */
export function init(limits, { keepDrafts }) {
  state.limits = limits;
  if (!keepDrafts) {
    // another user's drafts, which the one signing in was asked to discard (app.js)
    if (state.user !== null && state.user !== limits.user_id) drafts.clearUser(state.user);
    forget();
  }
  state.user = limits.user_id;
  aside.reset(); // read again for whoever signed in
  const tabs = $("file-tabs");
  tabs.replaceChildren();
  for (const { name, filename } of limits.files) {
    if (!state.files.has(name)) {
      state.files.set(name, {
        name, filename, base: "", draft: "", version: null, eol: "\n", stored: null,
        loaded: false, loading: false, error: null, conflict: null, kept: null, keptPending: false,
        checking: null, // an uncertain save's read-backs (file-save.js)
        keptFrom: null, // the version the set-aside text was based on (file-conflict.js)
        resolve: null, // the places of a re-apply to choose at (file-resolve.js)
        offer: null, // unsaved text kept in the browser, offered back (file-drafts.js)
      });
    }
    tabs.append(
      el("button", {
        type: "button", role: "tab", id: `tab-${name}`, "aria-controls": "file-panel",
        "data-name": name, onclick: () => select(name), onkeydown: tabKeys,
      }, filename, el("span", { class: "dot", "aria-hidden": "true" })),
    );
  }
  state.current = state.current && state.files.has(state.current) ? state.current : limits.files[0].name;
  for (const f of state.files.values()) load(f);
  select(state.current);
}

// Text set aside by "re-apply" counts as unsaved until the user next saves the file: from
// then on the panel is only a reference (it stays until dismissed, so nothing vanishes).
export const hasUnsaved = () => [...state.files.values()].some((f) => dirty(f) || f.conflict || setAside(f));
/** Unsaved text in the page, or kept in the browser and not yet restored or discarded. */
export const hasDrafts = () => hasUnsaved() || [...state.files.values()].some((f) => f.offer);

/** Sign-out: forget every file and draft, in the page and kept in the browser, and empty
 * the (hidden) editor. */
export function reset() {
  if (state.user !== null) drafts.clearUser(state.user);
  state.user = null;
  forget();
  state.current = null;
  state.focus = false;
  $("file-tabs").replaceChildren();
  aside.reset();
  for (const id of ["editor", "kept-text"]) $(id).value = "";
  $("conflict-diff").replaceChildren();
  $("resolve-list").replaceChildren();
  $("draft-offer-text").textContent = "";
  say("");
}

function forget() {
  for (const f of state.files.values()) cancelCheck(f);
  state.files.clear();
}

/** The files view was opened (again): load the current file again, so that a write made
 * meanwhile (by the agent, say) is shown, and one that failed to load is retried. */
export function opened() {
  const f = current();
  if (f && !f.loading) load(f);
  if (f) aside.refresh(f); // an agent's edit kept aside meanwhile shows too
}

/** Focus the editor, now or as soon as the current file has loaded (its Restore button
 * while a kept draft is offered: the editor is off until then). */
export function focusEditor() {
  state.focus = true;
  const f = current();
  if (f && f.loaded) {
    state.focus = false;
    $(f.offer ? "draft-restore" : "editor").focus();
  }
}

function tabKeys(event) {
  const names = [...state.files.keys()];
  const at = names.indexOf(state.current);
  const moves = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: names.length - 1 };
  if (!(event.key in moves)) return;
  event.preventDefault();
  const name = names[(moves[event.key] + names.length) % names.length];
  select(name);
  $(`tab-${name}`).focus();
}

function select(name) {
  state.current = name;
  const f = current();
  say(f.error ? loadError(f) : "", "error");
  render();
  aside.draw(); // this file's notices as last read, until they are read again
  aside.refresh(f);
  // read again on every selection: a write made meanwhile is shown (unless the user has a
  // draft of the file, which stays), and a tab that failed to load retries
  if (!f.loading) load(f);
}

const loadError = (f) => [
  `Could not load ${f.filename}. `, ...reason(f.error),
  f.error.status === 0 ? "" : " Press Retry to try again.",
];

async function load(f) {
  f.loading = true;
  const asked = f.version; // a save adopted while this read was out makes its answer old
  render();
  try {
    const { data } = await api("GET", path(f));
    if (!f.loaded) {
      f.draft = editorText(data.content);
      f.base = f.draft;
      f.version = data.version;
      f.eol = eolOf(data.content);
      f.stored = data.content;
      if (f.error && f === current()) say("");
      await offer(f);
    } else if (f.checking) {
      // an uncertain save's check is out: this read tells its outcome as the check's would
      if (f.version === asked) await settle(f, data);
    } else if (data.version !== f.version && f.version === asked) {
      // Read again. A draft (or a conflict) keeps the version it was based on, so that the
      // newer write surfaces as a conflict on save, never as a silent overwrite; only an
      // unedited file is replaced by the newer version.
      // (places being chosen are places of the version read: it stays until they are)
      const unedited = f.draft === f.base && !f.conflict && !f.resolve && !state.saving;
      const mine = !unedited && !f.conflict && !state.saving && holdsMine(f, data);
      if (unedited || mine) {
        f.draft = editorText(data.content);
        f.base = f.draft;
        f.version = data.version;
        f.eol = eolOf(data.content);
        f.stored = data.content;
      }
      if (f === current() && mine) say(`${f.filename} already holds your text: version ${data.version}.`);
      else if (f === current() && !f.conflict) {
        say(unedited
          ? `${f.filename} was changed elsewhere (the agent or another tab): version ${data.version} is shown.`
          : `${f.filename} was changed elsewhere: version ${data.version} is stored now. Your ` +
            "unsaved text is kept; saving shows both versions to choose from.", unedited ? "info" : "warn");
      }
    }
    f.loaded = true;
    f.error = null;
  } catch (error) {
    if (!f.loaded) {
      // kept on the file, so that the message is back whenever its tab is
      f.error = error;
      if (f === current()) say(loadError(f), "error");
    } else if (f.checking) {
      checkingNote(f, error, f === current()); // the save's check speaks for the file
    } else if (f === current()) {
      // the text on screen is still the user's to edit and save
      say([`Could not check ${f.filename} for a newer version. `, ...reason(error)], "warn");
    }
  } finally {
    f.loading = false;
    render();
  }
  if (f.loaded && f === current() && state.focus) focusEditor();
}

/** On a file's first read: unsaved text kept in the browser (a reload, a closed tab) is
 * offered back, unless the stored text holds it already. */
async function offer(f) {
  const kept = await drafts.read(f);
  if (kept && kept.text !== f.draft) f.offer = kept;
  else if (kept) drafts.forget(f, kept);
}

/** "Restore": the kept text back in the editor, on the version it was based on. If the file
 * was saved meanwhile (by anyone), that is a conflict: the conflict view, as on a 409. */
async function restore() {
  const f = current();
  const kept = f.offer;
  if (!kept || state.saving) return;
  let now;
  try {
    ({ data: now } = await api("GET", path(f)));
  } catch (error) {
    say([`Could not check ${f.filename} for a newer version. `, ...reason(error), " Your kept " +
      "changes are still offered: try Restore again."], "warn");
    return;
  }
  if (f.offer !== kept) return; // chosen meanwhile
  f.offer = null;
  Object.assign(f, { stored: now.content, eol: eolOf(now.content) });
  if (now.version === kept.version) {
    Object.assign(f, { base: editorText(now.content), version: now.version, draft: kept.text });
    drafts.adopt(f, kept);
    say(`Your unsaved changes to ${f.filename} are back in the editor.`, "info");
    render();
    $("editor").focus();
    return;
  }
  Object.assign(f, { base: kept.base, version: kept.version, draft: kept.text });
  drafts.adopt(f, kept);
  await conflict(f, now); // the stored text may even be the user's: then no conflict
  if (f.conflict && kept.places?.version === f.conflict.version && f === current()) {
    // the user left while choosing at the places of a re-apply onto this very version: back
    // to them, with the choices made (the merge is the server's: asked again, same answer)
    f.conflict.places = kept.places;
    await reapply();
    return;
  }
  if (f === current() && !f.conflict) $("editor").focus();
}

/** "Discard": asks, as Revert does; the kept text is then gone. */
function discardKept() {
  const f = current();
  const kept = f.offer;
  if (!kept) return;
  if (!confirm(`Discard your unsaved changes to ${f.filename}? There is no undo.`)) return;
  f.offer = null;
  drafts.forget(f, kept);
  say(`Discarded. ${f.filename} is version ${f.version} as stored.`, "info");
  render();
  $("editor").focus();
}

/** Save and Ctrl+S: write the current file if it has changes. */
export function save() {
  const f = current();
  if (f && state.saving && dirty(f)) {
    // Ctrl+S while a save is out (the Save button is off then): not dropped unsaid
    say(`Still saving ${f.filename}: what you typed since is not in this save. Save again once ` +
      "it is done.", "info");
    return;
  }
  if (f && canSave(f) && blankConfirmed(f, f.draft, f.base, f.version)) write(f, f.version);
}

/** Saving a blank `text` over version `version` (holding `stored`) empties the file, and
 * there is no undo: ask once, at the save. Not when the stored text is blank too (nothing is
 * lost), so an empty file is not a question on every save. Declined, nothing is written and
 * the draft stays. */
function blankConfirmed(f, text, stored, version) {
  if (!blank(text) || blank(stored)) return true;
  const asked = `Save ${f.filename} with no text? It replaces version ${version}, and there is no undo.`;
  if (confirm(asked)) return true;
  const back = f.conflict ? "" : " Revert brings its text back.";
  say(`Not saved: ${f.filename} is still version ${version}.${back}`, "info");
  return false;
}

export function wire() {
  $("editor").addEventListener("input", (event) => {
    current().draft = event.target.value;
    render();
  });
  $("file-save").addEventListener("click", () => save());
  $("file-revert").addEventListener("click", () => {
    const f = current();
    // there is no undo: ask, as Sign out does
    if (!confirm(`Discard your unsaved changes to ${f.filename} and go back to version ${f.version}?`)) return;
    f.draft = f.base;
    say(`Reverted to version ${f.version}.`, "info");
    render();
    $("editor").focus(); // Revert is now disabled
  });
  $("file-retry").addEventListener("click", () => load(current()));
  $("conflict-reapply").addEventListener("click", reapply);
  $("conflict-overwrite").addEventListener("click", () => {
    const f = current();
    const c = f.conflict;
    if (overwriteConfirmed(f)) write(f, c.version); // asks, a blank text included
  });
  $("conflict-copy").addEventListener("click", copyMine);
  $("conflict-shorten").addEventListener("click", editMine);
  $("resolve-apply").addEventListener("click", applyChoices);
  $("resolve-leave").addEventListener("click", leavePlaces);
  places.wire(current, render);
  $("draft-restore").addEventListener("click", restore);
  $("draft-discard").addEventListener("click", discardKept);
  aside.wire();
  $("kept-dismiss").addEventListener("click", () => {
    const f = current();
    // Not saved anywhere until the user saves the file: dismissing it is the end of that
    // text, with no undo, so ask, as Revert does (the reference copy after a save is not)
    const asked = `Dismiss your earlier text of ${f.filename}? It was not saved, and there is no undo.`;
    if (f.keptPending && !confirm(asked)) return;
    f.kept = null;
    f.keptPending = false;
    render();
    $("editor").focus();
  });
}
