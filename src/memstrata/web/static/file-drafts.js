// Unsaved text kept across a reload: in localStorage, one record per user, file and tab,
// with the version (and its text) it was based on, so that a reload, a crash or a closed tab
// does not lose it; offered back on the next sign-in (files.js). Tabs of one browser share
// localStorage: each keeps its own record (its id lives in the tab's sessionStorage, which a
// reload keeps), so that no tab writes over, or removes, another's text. A tab offers its
// own record first, else one a tab no longer open left behind. A Web Lock per tab tells
// which are open; without Web Locks (a plain-HTTP address other than localhost: they exist
// only in secure contexts) the open tabs answer a question on a BroadcastChannel, which
// works there; without either, every other tab's record counts as left behind.
// Cleared on Sign out (the records of tabs still open excepted), so the next user of a
// shared browser never sees them. No DOM and no requests here: render() asks for a write
// after every change (`schedule`), and what is written is read from the files' state.

import { dirty, setAside, state } from "./file-state.js";

const PREFIX = "memstrata.draft:";
const TAB_ID = "memstrata.tab"; // sessionStorage: this tab's id, kept across its reloads
const LOCK = "memstrata.tab:"; // + the tab id: held while the tab is open
const CHANNEL = "memstrata.tabs"; // without Web Locks: "which tabs are open?", answered
// How long a question on the channel waits for the answers. An open tab answers in a few
// milliseconds, hidden or not (timers are throttled in a hidden tab, messages are not); one
// too busy (or frozen by the browser) to answer in time counts as closed, and its record
// may be offered here: moved into this tab, not lost (flush() writes it back in its own
// tab). The wait is paid by a file's first read, and only without Web Locks.
const ANSWER_MS = 300;
// Writes wait this long after the last change: one write per pause in typing, not per key.
const DELAY_MS = 250;
// Records left behind are kept this long, and at most this many per user and file (the
// newest), so that closed tabs do not fill the browser's few megabytes of storage.
const LEFT_DAYS = 30;
const LEFT_MAX = 3;

let timer = null;
// key -> {same, stored}: the record last written (without its time) and the string stored,
// to skip a rewrite only while storage still holds it (another tab's Sign out may not)
const written = new Map();

const key = (user, name, tab) => `${PREFIX}${JSON.stringify([user, name, tab])}`;
const newId = () => `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;

function ownId() {
  try {
    const id = sessionStorage.getItem(TAB_ID) ?? newId();
    sessionStorage.setItem(TAB_ID, id);
    return id;
  } catch {
    return newId();
  }
}

let tab = ownId();

const channel = typeof BroadcastChannel === "function" ? new BroadcastChannel(CHANNEL) : null;
// Answered with the id this tab has now, even while it checks its own (below): two tabs
// duplicated at once then both take new ids, and their records count as left behind.
channel?.addEventListener("message", ({ data }) => {
  if (typeof data?.ask === "string") channel.postMessage({ answer: data.ask, tab });
});

/** The ids of the other tabs open now, as they answer on the channel (null: no channel). */
function ask() {
  if (!channel) return Promise.resolve(null);
  const question = newId();
  const ids = new Set();
  const hear = ({ data }) => {
    if (data?.answer === question && typeof data.tab === "string") ids.add(data.tab);
  };
  channel.addEventListener("message", hear);
  channel.postMessage({ ask: question });
  return new Promise((resolve) => {
    setTimeout(() => {
      channel.removeEventListener("message", hear);
      resolve(ids);
    }, ANSWER_MS);
  });
}

/** Take a new id: a duplicated tab copies sessionStorage, so its id may be another's. */
function renew() {
  tab = newId();
  try {
    sessionStorage.setItem(TAB_ID, tab);
  } catch {
    // storage off: the id lives as long as the page
  }
}

/** Hold this tab's lock as long as the page lives (true), taking a new id while its own is
 * held elsewhere; without Web Locks (false), a new id if another open tab answers with it. */
async function hold() {
  if (navigator.locks) {
    try {
      for (;;) {
        const got = await new Promise((resolve) => {
          navigator.locks.request(LOCK + tab, { ifAvailable: true }, (lock) => {
            resolve(Boolean(lock));
            return lock ? new Promise(() => {}) : undefined;
          });
        });
        if (got) return true;
        renew();
      }
    } catch {
      // locks refused (an opaque origin): the channel is asked instead
    }
  }
  if ((await ask())?.has(tab)) renew();
  return false;
}

const held = hold();

/** The ids of the tabs open now, this one's included (null: not known). */
async function openTabs() {
  if (await held) {
    try {
      const { held: locks } = await navigator.locks.query();
      return new Set(locks.map((lock) => lock.name.slice(LOCK.length)));
    } catch {
      // fall through to the channel
    }
  }
  const others = await ask();
  return others && others.add(tab);
}

/** Every stored record of `user` (and file `name`, if given): [{key, tab, record}]. */
function stored(user, name) {
  const found = [];
  for (const k of Object.keys(localStorage)) {
    if (!k.startsWith(PREFIX)) continue;
    let parts, record;
    try {
      parts = JSON.parse(k.slice(PREFIX.length));
      record = JSON.parse(localStorage.getItem(k) ?? "null");
    } catch {
      continue;
    }
    if (!Array.isArray(parts) || parts[0] !== user || (name !== undefined && parts[1] !== name)) continue;
    found.push({ key: k, tab: parts[2] ?? null, record });
  }
  return found;
}

const fine = (record) => record && typeof record.text === "string" && typeof record.base === "string" &&
  Number.isInteger(record.version);
const newest = (a, b) => String(b.record?.at ?? "").localeCompare(String(a.record?.at ?? ""));

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
    const name = key(state.user, f.name, tab);
    const same = JSON.stringify(record);
    try {
      const last = written.get(name);
      if (last && last.same === same && localStorage.getItem(name) === last.stored) continue;
      const text = record ? JSON.stringify({ ...record, at: new Date().toISOString() }) : null;
      if (text) localStorage.setItem(name, text);
      else localStorage.removeItem(name);
      written.set(name, { same, stored: text });
    } catch {
      // storage full or turned off: the text stays in the page, as it always did
    }
  }
}

/** The kept record of file `f` for the signed-in user: this tab's, else the newest a closed
 * tab left behind, as {text, base, version, at, places?, from} (`from`: its storage key), or
 * null (`places` is checked where it is used: file-resolve.js `begin`). Left-behind records
 * past the bounds are removed here. */
export async function read(f) {
  try {
    if (!stored(state.user, f.name).length) return null; // nothing kept: nothing to wait for
    await held; // a duplicated tab has an id of its own by now
    // Which tabs are open is asked only when another tab's record is there (without Web
    // Locks the question takes ANSWER_MS); when none is, the reading below follows in the
    // same task, with no open tabs to exclude.
    const others = stored(state.user, f.name).some((r) => r.tab !== tab);
    const open = others ? await openTabs() : null;
    const all = stored(state.user, f.name).filter((r) => fine(r.record));
    const own = all.find((r) => r.tab === tab);
    const oldest = new Date(Date.now() - LEFT_DAYS * 86_400_000).toISOString();
    const left = all.filter((r) => r.tab !== tab && !open?.has(r.tab)).sort(newest);
    for (const [at, r] of left.entries()) {
      if (at >= LEFT_MAX || String(r.record.at ?? "") < oldest) localStorage.removeItem(r.key);
    }
    const kept = own ?? left.find((r, at) => at < LEFT_MAX && String(r.record.at ?? "") >= oldest);
    return kept ? { ...kept.record, from: kept.key } : null;
  } catch {
    return null;
  }
}

/** Forget file `f`'s record in this tab, and `kept` (a record `read` gave, this tab's or
 * one left behind): discarded, or the stored text holds it already. */
export function forget(f, kept = null) {
  const name = key(state.user, f.name, tab);
  written.delete(name);
  try {
    localStorage.removeItem(name);
    if (kept?.from) localStorage.removeItem(kept.from);
  } catch {
    // nothing kept to remove
  }
}

/** "Restore" took the `kept` record's text into this tab: written as this tab's now, the
 * record a closed tab left behind goes (were that tab open after all, its next write puts
 * its record back: `flush` checks storage before it skips one). */
export function adopt(f, kept) {
  flush();
  const own = state.user === null ? null : key(state.user, f.name, tab);
  try {
    if (kept?.from && kept.from !== own) localStorage.removeItem(kept.from);
  } catch {
    // storage off: nothing was kept
  }
}

/** Sign-out: every record of `user` but those of tabs still open (signed in there; a tab
 * that signs out clears its own), none left for whoever uses this browser next. */
export function clearUser(user) {
  clearTimeout(timer);
  timer = null;
  written.clear();
  const mine = (r) => r.tab === tab;
  try {
    for (const r of stored(user)) if (mine(r)) localStorage.removeItem(r.key);
  } catch {
    // storage off: nothing was kept
  }
  return openTabs().then((open) => {
    try {
      for (const r of stored(user)) if (!open?.has(r.tab)) localStorage.removeItem(r.key);
    } catch {
      // as above
    }
  });
}

// A reload or a closed tab comes before the next pause in typing.
window.addEventListener("pagehide", flush);
