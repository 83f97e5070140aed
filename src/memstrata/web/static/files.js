// The memory files view: SOUL / USER / MEMORY tabs, an editor, save with If-Match, and the
// conflict view on 409. The user's text lives in `draft` until the server has it; no path
// (conflict, error, expired token) replaces a draft without keeping it visible.

import { api, reason } from "./api.js";
import { diffLines, merge3, sideBySide, splitLines } from "./diff.js";
import { $, banner, bytes, el, number, sentence } from "./dom.js";

const encoder = new TextEncoder();
// The message line always holds something, so a message never pushes the editor down.
const HINT = "Ctrl+S saves. Saving checks the version you started from: nobody's edit is overwritten silently.";
const state = { limits: null, files: new Map(), current: null, saving: false, focus: false };

const size = (text) => encoder.encode(text).length;
const dirty = (f) => f.loaded && f.draft !== f.base;
// the Save button's rule, which Ctrl+S follows too: an unchanged file is not written again
const canSave = (f) => f.loaded && !state.saving && !f.conflict && dirty(f);
// text set aside by "re-apply" that the user has not yet saved or dismissed
const setAside = (f) => f.kept !== null && f.keptPending;
const path = (f) => `api/config/agent-files/${encodeURIComponent(f.name)}`;

/** After sign-in: build the tabs from the server's list of files and load them. */
export function init(limits, { keepDrafts }) {
  state.limits = limits;
  if (!keepDrafts) state.files.clear();
  const tabs = $("file-tabs");
  tabs.replaceChildren();
  for (const { name, filename } of limits.files) {
    if (!state.files.has(name)) {
      state.files.set(name, {
        name, filename, base: "", draft: "", version: null,
        loaded: false, loading: false, error: null, conflict: null, kept: null, keptPending: false,
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

/** Sign-out: forget every file and draft, and empty the (hidden) editor. */
export function reset() {
  state.files.clear();
  state.current = null;
  state.focus = false;
  $("file-tabs").replaceChildren();
  for (const id of ["editor", "kept-text"]) $(id).value = "";
  $("conflict-diff").replaceChildren();
  say("");
}

/** The files view was opened (again): retry a file that failed to load. */
export function opened() {
  const f = current();
  if (f && !f.loaded && !f.loading) load(f);
}

/** Focus the editor, now or as soon as the current file has loaded. */
export function focusEditor() {
  state.focus = true;
  const f = current();
  if (f && f.loaded) {
    state.focus = false;
    $("editor").focus();
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

function say(text, kind = "info") {
  banner($("file-message"), text || HINT, text ? kind : "quiet");
}

function select(name) {
  state.current = name;
  const f = current();
  say(f.error ? loadError(f) : "", "error");
  render();
  if (!f.loaded && !f.loading) load(f); // a tab that failed to load retries when opened
}

const loadError = (f) =>
  `Could not load ${f.filename}. ${reason(f.error)}${f.error.status === 0 ? "" : " Press Retry to try again."}`;

const current = () => state.files.get(state.current);

async function load(f) {
  f.loading = true;
  render();
  try {
    const { data } = await api("GET", path(f));
    // A draft kept across an expired sign-in keeps the version it was based on, so that a
    // write made meanwhile (by the agent, say) surfaces as a conflict on save, not as a
    // silent overwrite.
    if (!f.loaded || (f.draft === f.base && !f.conflict)) {
      f.draft = data.content;
      f.base = data.content;
      f.version = data.version;
    }
    f.loaded = true;
    if (f.error && f === current()) say("");
    f.error = null;
  } catch (error) {
    // kept on the file, so that the message is back whenever its tab is
    f.error = error;
    if (f === current()) say(loadError(f), "error");
  } finally {
    f.loading = false;
    render();
  }
  if (f.loaded && f === current() && state.focus) focusEditor();
}

/** Save and Ctrl+S: write the current file if it has changes. */
export function save() {
  const f = current();
  if (f && canSave(f)) write(f, f.version);
}

async function write(f, version) {
  if (state.saving) return;
  const content = f.conflict ? f.conflict.mine : f.draft;
  state.saving = true;
  render();
  try {
    const { data } = await api("PUT", path(f), {
      body: { content },
      headers: { "If-Match": `"${version}"` },
    });
    adopt(f, content, data.version);
    say(`Saved ${f.filename} as version ${data.version}.`, "ok");
  } catch (error) {
    // The editor stays open while a save is in flight, so the text to keep is the draft as
    // it is now, not `content`: what was typed meanwhile must reach the conflict view too.
    if (error.status === 409) await conflict(f);
    else if (uncertain(error)) await readBack(f, version, content, error);
    else say(saveError(f, error), "error");
  } finally {
    state.saving = false;
    render();
  }
  // Save was disabled while saving, which dropped the focus to <body>: back to the text.
  if (f === current() && !f.conflict && document.activeElement === document.body) $("editor").focus();
}

/** `content`, written on top of the file's version, is now stored as `version`. What was
 * typed while the save was out stays in the draft, unsaved on top of the new version. */
function adopt(f, content, version) {
  f.base = content;
  f.version = version;
  if (f.conflict) f.draft = content;
  f.conflict = null;
  f.keptPending = false;
}

// A failure after which the write may have been stored: any 5xx (a 500, a gateway's 502 or
// 504, a 503 — the server's shutdown answers 503 to a request whose edit still lands), or a
// request cut off (it may have reached the server).
const uncertain = (error) => error.status === 0 || error.status >= 500;

/** After an uncertain failure, read the file back, so that saving again does not meet the
 * user's own write as someone else's. The server stores the text exactly as sent (no
 * newline or Unicode normalisation), hence the exact comparison: `version + 1` holding
 * this text is this write (or an identical one: the same outcome). */
async function readBack(f, version, content, error) {
  let now;
  try {
    ({ data: now } = await api("GET", path(f)));
  } catch {
    say(saveError(f, error), "error"); // still unknown: "may or may not have been saved"
    return;
  }
  if (now.version === version + 1 && now.content === content) {
    adopt(f, content, now.version);
    const later = dirty(f) ? " What you typed since is not saved yet." : "";
    say(`Saved ${f.filename} as version ${now.version} (the server's answer was lost; the file ` +
      `was read back to check).${later}`, "ok");
  } else if (now.version === version) {
    const why = error.status === 0 ? "The connection was lost while saving." : reason(error);
    say(`${why} Nothing was written: ${f.filename} is still version ${version} (the file was ` +
      "read back to check). Your text is still in the editor; save again.", "error");
  } else {
    // changed by another writer (after this write, or instead of it): what a 409 shows
    await conflict(f, now);
  }
}

function saveError(f, error) {
  const kept = "Nothing was written; your text is still in the editor.";
  const why = sentence(error.message);
  switch (error.status) {
    case 413: {
      // The server's own text names its settings; the user gets the page's numbers.
      const used = size(f.conflict ? f.conflict.mine : f.draft);
      const limit = state.limits.max_content_bytes;
      const over = used > limit ? `: ${number(used)} of ${number(limit)} bytes` : "";
      return `${f.filename} is too large to save${over}. Shorten it and save again. ${kept}`;
    }
    case 422:
      return `The server refused this text: ${why} ${kept}`;
    case 400:
      return `The request was refused: ${why} ${kept}`;
    case 401:
      return `Your sign-in ended (${error.message}). ${kept} Sign in again to save it.`;
    case 0:
      // the request may have been sent before the connection failed
      return `Could not reach the server. Your text is still in the editor. Check your connection, then save again.`;
    default:
  }
  if (error.status >= 500) {
    // A 500 or a gateway's 502/504 can come after the file was stored (when the read-back
    // cannot tell). Saving again is safe: it still sends the version that was read, so
    // nothing is overwritten blindly.
    return `${reason(error)} Your text is still in the editor; it may or may not have been saved. ` +
      "Save again to make sure.";
  }
  return `Saving failed. ${reason(error)} ${kept}`;
}

/** 409: fetch what is stored now (unless a read-back already has) and show it beside the
 * user's text (read once the answer is in: the user may have typed on while the save and
 * this fetch were in flight). */
async function conflict(f, stored = null) {
  try {
    if (!stored) ({ data: stored } = await api("GET", path(f)));
  } catch (failure) {
    say(
      `${f.filename} was not saved: it was changed elsewhere, and loading the newer version failed. ` +
      `${reason(failure)} Your text is still in the editor; save again to compare.`, "error");
    return;
  }
  const mine = f.conflict ? f.conflict.mine : f.draft;
  f.conflict = { mine, started: f.base, startedVersion: f.version, content: stored.content, version: stored.version };
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

function reapply() {
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

async function copyMine() {
  const c = current().conflict;
  try {
    await navigator.clipboard.writeText(c.mine);
    say("Your text is on the clipboard.", "ok");
  } catch {
    say("The browser did not allow copying; select the right column and copy it.", "warn");
  }
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
  const used = size(f.conflict ? f.conflict.mine : f.draft);
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
  $("conflict-overwrite").disabled = state.saving;
  const theirs = splitLines(c.content);
  const mine = splitLines(c.mine);
  const cell = (side, which) =>
    el("div", { role: "cell", class: `cell ${side ? side.kind : "empty"}`, "data-side": which },
      el("span", { class: "ln", "aria-hidden": "true" }, side ? side.line : ""),
      el("span", { class: "tx" }, side ? side.text : ""));
  const rows = sideBySide(diffLines(theirs, mine), theirs, mine).map((row) =>
    el("div", { role: "row", class: "row" }, cell(row.left, "stored"), cell(row.right, "mine")));
  $("conflict-diff").replaceChildren(...rows);
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
    write(f, f.conflict.version);
  });
  $("conflict-copy").addEventListener("click", copyMine);
  $("kept-dismiss").addEventListener("click", () => {
    current().kept = null;
    current().keptPending = false;
    render();
    $("editor").focus();
  });
}
