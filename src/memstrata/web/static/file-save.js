// Writing a file: every save sends the version that was read (If-Match), and a failure
// that may have been stored anyway is read back before the user is told anything, so that
// saving again does not meet the user's own write as someone else's.

import { api, reason, serverSentence } from "./api.js";
import { $, number } from "./dom.js";
import { refresh as refreshAside } from "./file-aside.js";
import { conflict } from "./file-conflict.js";
import { current, dirty, path, size, state, storedText, tooLarge, used } from "./file-state.js";
import { render, say } from "./file-view.js";

// A save is indexed for search before it is answered; a large file can take many seconds.
const SLOW_SAVE_MS = 2000;
// From this size a slow save is put down to indexing; a smaller one is the network's.
const LARGE_SAVE_BYTES = 32 * 1024;

export async function write(f, version) {
  // over the limit the server would refuse it (413): Save and overwrite are off (file-view.js)
  if (state.saving || state.merging || tooLarge(f)) return;
  const text = f.conflict ? f.conflict.mine : f.draft;
  const content = storedText(f, text); // in the file's own line endings
  cancelCheck(f); // this save's outcome is the one to tell
  state.saving = true;
  render();
  const large = size(content) >= LARGE_SAVE_BYTES ? " a large file takes a while to index for search." : "";
  const slow = setTimeout(() => say(`Still saving ${f.filename}…${large}`, "info"), SLOW_SAVE_MS);
  try {
    const { data } = await api("PUT", path(f), {
      body: { content },
      headers: { "If-Match": `"${version}"` },
    }).finally(() => clearTimeout(slow));
    adopt(f, text, data.version);
    // unchanged: the file held this text already (another writer's, or a server that answers
    // so on an older version too), so nothing was written and the version is the stored one
    if (data.unchanged) holdsSent(f, data.version);
    else say(`Saved ${f.filename} as version ${data.version}.`, "ok");
    // an agent's edit waiting in its workspace that conflicted with this one was kept aside
    refreshAside(f);
  } catch (error) {
    // The editor stays open while a save is in flight, so the text to keep is the draft as
    // it is now, not `content`: what was typed meanwhile must reach the conflict view too.
    if (error.status === 409 && error.body?.same_content === true) {
      // The newer version holds the very text sent (an earlier save of it whose answer was
      // lost, or another writer's): saved, and what was typed since stays unsaved on top.
      adopt(f, text, error.body.current_version);
      holdsSent(f, error.body.current_version);
      refreshAside(f);
    } else if (error.status === 409) await conflict(f);
    else if (error.unsent) {
      say(`Not saved: this browser is offline, so ${f.filename} was not sent. Your text is still ` +
        "in the editor; save again once you are back online.", "error");
    } else if (uncertain(error)) await readBack(f, version, text, error);
    else say(saveError(f, error), "error");
  } finally {
    state.saving = false;
    render();
  }
  // Save was disabled while saving, which dropped the focus to <body>: back to the text.
  if (f === current() && !f.conflict && document.activeElement === document.body) $("editor").focus();
}

/** Say that the stored `version` of `f` holds the text the save sent: nothing was written. */
function holdsSent(f, version) {
  const later = dirty(f) ? " What you typed since is not saved yet." : "";
  say(`${f.filename} already holds your text: version ${version}.${later}`, "info");
}

/** `text` (as the editor holds it), written on top of the file's version, is now stored as
 * `version`. What was typed while the save was out stays in the draft, unsaved on top of
 * the new version. */
function adopt(f, text, version) {
  f.base = text;
  f.stored = storedText(f, text); // as sent, and so as stored
  f.version = version;
  if (f.conflict) f.draft = text;
  f.conflict = null;
  f.keptPending = false;
}

// A failure after which the write may have been stored: any 5xx (a 500, a gateway's 502 or
// 504, a 503 — the server's shutdown answers 503 to a request whose edit still lands), or a
// request cut off (it may have reached the server).
const uncertain = (error) => error.status === 0 || error.status >= 500;

// Behind a gateway the answer can be a timeout (504) while the write still runs on the
// server (a large first save is indexed for search for minutes): one early read-back finding
// the old version proves nothing, so the file is read again with backoff, for this long in
// all, before the page says the text was not saved.
const CHECK_DELAYS_MS = [1, 2, 4, 8, 15, 30, 30, 30].map((s) => s * 1000);
const CHECK_MINUTES = CHECK_DELAYS_MS.reduce((a, b) => a + b) / 60_000;

/** After an uncertain failure, read the file back until it tells (see `settle`), so that
 * saving again does not meet the user's own write as someone else's. The check goes on
 * while the user types (what they typed stays unsaved on top of the version it finds);
 * a new save of the file (`cancelCheck`) or signing out ends it. */
async function readBack(f, version, text, error) {
  // `away`: a read found the server out of reach too (stopped, restarting)
  const c = { version, text, error, left: [...CHECK_DELAYS_MS], read: false, away: false, timer: null };
  f.checking = c;
  await check(f, c);
}

async function check(f, c) {
  let now = null;
  try {
    ({ data: now } = await api("GET", path(f)));
    c.read = true;
  } catch (failure) {
    // signed out (api.js says why): the drafts wait for the next sign-in, whose read of the
    // file tells whether it holds the user's text (files.js)
    if (failure.status === 401 && f.checking === c) f.checking = null;
    if (failure.status === 0) c.away = true;
  }
  if (f.checking !== c) return; // ended while the read was out
  if (now && (await settle(f, now))) return;
  const wait = c.left.shift();
  if (wait === undefined) {
    f.checking = null;
    if (c.read) {
      say([...why(c.error), ` Not saved: ${f.filename} is still version ${c.version} after checking ` +
        `for ${CHECK_MINUTES} minutes. Your text is still in the editor; save again.`], "error");
    } else say(saveError(f, c.error), "error"); // still unknown: "may or may not have been saved"
  } else {
    if (c.left.length === CHECK_DELAYS_MS.length - 1) checkingNote(f);
    c.timer = setTimeout(() => check(f, c), wait);
  }
  render();
}

/** Say that file `f`'s uncertain save is being checked (again, when `shown`, after a read
 * of the file failed with `failure`: files.js `load`, which then counts as the check's). */
export function checkingNote(f, failure = null, shown = true) {
  const c = f.checking;
  if (!c) return;
  if (failure?.status === 0) c.away = true;
  if (!shown) return;
  say([...why(c.error), ` ${f.filename} may still be saving on the server: checking again for ` +
    `up to ${CHECK_MINUTES} minutes. Your text is still in the editor.`], "warn");
}

const why = (error) => (error.status === 0 ? ["The connection was lost while saving."] : reason(error));

/** A read of the file while a check is out (the check's own, or the tab's `load`); true
 * once it tells what the save came to. The server stores the text exactly as sent (no
 * newline or Unicode normalisation), hence the exact comparison: `version + 1` holding the
 * text sent is this write (or an identical one: the same outcome). The old version tells
 * nothing yet (unless the server was out of reach meanwhile: below). Any other is another
 * writer's, or a text the user's draft already equals: what a 409 shows (`conflict` tells
 * the two apart). */
export async function settle(f, now) {
  const c = f.checking;
  if (!c) return false;
  if (now.version === c.version) {
    // The old version proves nothing while a write may still run (behind a gateway's 504).
    // A connection lost, then the server out of reach and answering again (a restart), is
    // over, whatever it was: the old version is the outcome. (Were the write still to land,
    // saving again meets it as the user's own text: file-conflict.js.)
    if (c.error.status !== 0 || !c.away) return false;
    cancelCheck(f);
    say(`Not saved: the server could not be reached, and now that it answers, ${f.filename} is ` +
      `still version ${now.version}. Your text is still in the editor; save again.`, "error");
    render();
    return true;
  }
  cancelCheck(f);
  if (now.version === c.version + 1 && now.content === storedText(f, c.text)) {
    adopt(f, c.text, now.version);
    const later = dirty(f) ? " What you typed since is not saved yet." : "";
    say(`Saved ${f.filename} as version ${now.version} (the server's answer was lost; the file ` +
      `was read back to check).${later}`, "ok");
    refreshAside(f);
  } else await conflict(f, now);
  render();
  return true;
}

/** A new save of the file, or sign-out: the earlier save's check ends unsaid. */
export function cancelCheck(f) {
  if (f.checking) clearTimeout(f.checking.timer);
  f.checking = null;
}

/** The sentences for a failed save: a list of parts for `say`, the server's words isolated. */
function saveError(f, error) {
  const kept = "Nothing was written; your text is still in the editor.";
  switch (error.status) {
    case 413: {
      // The server's own text names its settings; the user gets the page's numbers.
      const limit = state.limits.max_content_bytes;
      if (used(f) > limit) {
        return [`${f.filename} is too large to save: ${number(used(f))} of ${number(limit)} bytes. ` +
          `Shorten it and save again. ${kept}`];
      }
      // Under the file limit, over the request limit (the text's JSON escapes take bytes):
      // the server's 413 says its limit. A proxy's (with its own, smaller limit) does not.
      const request = error.told ? /limit of (\d+) bytes/.exec(error.message)?.[1] : undefined;
      if (request === undefined) return [`${f.filename} is too large to save. Shorten it and save again. ${kept}`];
      return [`${f.filename} could not be sent: the request is over the server's limit of ` +
        `${number(Number(request))} bytes (a request is a little larger than the file it carries). ` +
        `Shorten the file and save again. ${kept}`];
    }
    case 422:
      return ["The server refused this text: ", serverSentence(error), ` ${kept}`];
    case 400:
      return ["The request was refused: ", serverSentence(error), ` ${kept}`];
    case 401:
      // (the server's reason names its settings: not for the person at the page, app.js)
      return [`Your sign-in ended. ${kept} Sign in again to save it.`];
    case 0:
      // the request may have been sent before the connection failed
      return ["Could not reach the server. Your text is still in the editor; it may or may not " +
        "have been saved. Check your connection, then save again to make sure."];
    default:
  }
  if (error.status >= 500) {
    // Any 5xx can come after the file was stored (here: the read-back could not tell). Saving again is safe: it still sends the version that was read, so
    // nothing is overwritten blindly.
    return [...reason(error), " Your text is still in the editor; it may or may not have been " +
      "saved. Save again to make sure."];
  }
  return ["Saving failed. ", ...reason(error), ` ${kept}`];
}
