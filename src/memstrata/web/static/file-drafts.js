// Unsaved text kept across a reload: in localStorage, one record per user and file, with
// the version (and its text) it was based on, so that a reload, a crash or a closed tab
// does not lose it; offered back on the next sign-in (files.js). Keyed by the user id and
// cleared on Sign out, so the next user of a shared browser never sees it. No DOM and no
// requests here: render() asks for a write after every change (`schedule`), and what is
// written is read from the files' state.

import { dirty, setAside, state } from "./file-state.js";

const PREFIX = "memstrata.draft:";
// Writes wait this long after the last change: one write per pause in typing, not per key.
const DELAY_MS = 250;

let timer = null;
const written = new Map(); // key -> the record last written (without its time), to skip rewrites

const key = (user, name) => `${PREFIX}${JSON.stringify([user, name])}`;

/** What of file `f` is unsaved, as {text, base, version} (null: nothing): a conflict's text
 * (based on the version the user started from), the draft, or the text re-apply set aside,
 * with the choices made so far at the places it left (`places`, file-resolve.js). */
function unsaved(f) {
  if (f.conflict) {
    const c = f.conflict;
    return { text: c.mine, base: c.started, version: c.startedVersion };
  }
  if (dirty(f)) return { text: f.draft, base: f.base, version: f.version };
  if (setAside(f) && f.keptFrom) {
    const r = f.resolve;
    const places = r ? { places: { version: r.version, chosen: r.chosen, written: r.written } } : {};
    return { text: f.kept, ...f.keptFrom, ...places };
  }
  return null;
}

/** Write every file's unsaved text soon (render calls it after each change). */
export function schedule() {
  clearTimeout(timer);
  timer = setTimeout(flush, DELAY_MS);
}

/** Write now: what is unsaved is kept, what is saved or discarded is removed. A file not
 * loaded yet, or whose kept text is still offered back, is left as it is. */
export function flush() {
  clearTimeout(timer);
  timer = null;
  if (!state.user) return;
  for (const f of state.files.values()) {
    if (!f.loaded || f.offer) continue;
    const record = unsaved(f);
    const name = key(state.user, f.name);
    const same = JSON.stringify(record);
    if (written.get(name) === same) continue;
    try {
      if (record) localStorage.setItem(name, JSON.stringify({ ...record, at: new Date().toISOString() }));
      else localStorage.removeItem(name);
      written.set(name, same);
    } catch {
      // storage full or turned off: the text stays in the page, as it always did
    }
  }
}

/** The kept record of file `f` for the signed-in user: {text, base, version, at, places?},
 * or null (`places` is checked where it is used: file-resolve.js `begin`). */
export function read(f) {
  try {
    const record = JSON.parse(localStorage.getItem(key(state.user, f.name)) ?? "null");
    const fine = record && typeof record.text === "string" && typeof record.base === "string" &&
      Number.isInteger(record.version);
    return fine ? record : null;
  } catch {
    return null;
  }
}

/** Forget file `f`'s record (discarded, or the stored text holds it already). */
export function forget(f) {
  const name = key(state.user, f.name);
  written.delete(name);
  try {
    localStorage.removeItem(name);
  } catch {
    // nothing kept to remove
  }
}

/** Sign-out: every record of `user`, none left for whoever uses this browser next. */
export function clearUser(user) {
  clearTimeout(timer);
  timer = null;
  written.clear();
  try {
    const mine = PREFIX + JSON.stringify([user]).slice(0, -1) + ",";
    for (const name of Object.keys(localStorage)) if (name.startsWith(mine)) localStorage.removeItem(name);
  } catch {
    // storage off: nothing was kept
  }
}

// A reload or a closed tab comes before the next pause in typing.
window.addEventListener("pagehide", flush);
