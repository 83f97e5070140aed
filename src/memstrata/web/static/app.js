// The page's entry point: sign-in, the three views, leaving with unsaved changes.

import { api, claims, onUnauthorized, token } from "./api.js";
import { $, banner, bdi, isolated } from "./dom.js";
import * as files from "./files.js";
import * as search from "./search.js";
import * as skills from "./skills.js";

const VIEWS = ["files", "skills", "search"];
const KEPT = "Unsaved edits stay in this page until you close it.";
let user = null; // the user id of the last sign-in: drafts are kept only for the same user
let expiry = null;
// setTimeout takes at most 2^31 - 1 ms (24.8 days); a longer delay fires at once.
const MAX_DELAY = 2 ** 31 - 1;

/** The view on screen, or null while signed out. */
const shown = () => VIEWS.find((name) => !$(`${name}-view`).hidden) ?? null;

function route() {
  // signed in: a token, and the nav shown (a token kept after a failed sign-in is not enough)
  if (!token.get() || $("nav").hidden) return;
  const wanted = location.hash.slice(1);
  // a hash that names no view (#main, say) leaves the view on screen as it is
  const view = VIEWS.includes(wanted) ? wanted : (shown() ?? "files");
  $("signin-view").hidden = true;
  for (const name of VIEWS) $(`${name}-view`).hidden = name !== view;
  for (const link of $("nav").querySelectorAll("a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  // opening a view again retries what failed to load there
  if (view === "files") files.opened();
  if (view === "skills") skills.opened();
}

/** `keep`: a token to leave in the field, so that pressing Sign in tries it again (or so
 * that a refused one can be checked against what was copied). */
function signedOut(message, kind = "error", keep = "") {
  clearTimeout(expiry);
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  for (const name of VIEWS) $(`${name}-view`).hidden = true;
  $("signin-view").hidden = false;
  banner($("signin-error"), message, kind);
  $("token").value = keep;
  $("token").focus();
}

async function signIn(candidate) {
  const submit = $("signin-submit");
  submit.disabled = true;
  // a slow network: say that something is happening (a reload with a kept token shows it
  // too, rather than an empty page)
  submit.textContent = "Signing in…";
  $("signin-view").hidden = false;
  banner($("signin-error"), "Signing in…", "info");
  let limits;
  try {
    ({ data: limits } = await api("GET", "api/config/limits", { bearer: candidate }));
  } catch (error) {
    if (error.status === 401) {
      token.clear();
      signedOut(refusal(candidate), "error", $("token").value);
    } else {
      // Not the token's fault (the server is down, restarting, overloaded): keep it, in this
      // tab's storage and in the field, so that Sign in or a reload tries it again.
      const status = [error.told ? `HTTP ${error.status}: ` : "", bdi(error.message)];
      signedOut(error.status === 0
        ? "Could not reach the server. Check your connection, then press Sign in to try again: " +
          "your token is kept."
        : ["Could not sign in. The server could not answer (", ...status, "). Your token is kept: " +
          "press Sign in to try again."], "error", candidate);
    }
    return;
  } finally {
    submit.disabled = false;
    submit.textContent = "Sign in";
  }
  // user ids are isolated (dom.js): their letters cannot reorder the sentence around them
  if (user !== null && user !== limits.user_id && files.hasDrafts() &&
      !confirm(`This page holds unsaved changes of ${isolated(user)}. Sign in as ` +
        `${isolated(limits.user_id)} and discard them?`)) {
    signedOut(["Not signed in: that token is for ", bdi(limits.user_id), ". The unsaved changes of ",
      bdi(user), " are still here; sign in as ", bdi(user), " to save them."], "info");
    return;
  }
  token.set(candidate);
  const keepDrafts = user === limits.user_id;
  user = limits.user_id;
  $("nav").hidden = false;
  $("signout").hidden = false;
  const exp = claims(candidate)?.exp;
  $("who").textContent = user;
  $("who").title = exp
    ? `signed in as ${isolated(user)}; token expires ${new Date(exp * 1000).toLocaleString()}`
    : `signed in as ${isolated(user)}`;
  banner($("signin-error"), "");
  clearTimeout(expiry);
  if (exp) expireAt(exp * 1000);
  files.init(limits, { keepDrafts });
  search.init(limits);
  skills.load();
  route();
  // the focused token field is gone: give focus to the view, not to <body>
  if (!$("files-view").hidden) files.focusEditor();
  else if (!$("search-view").hidden) $("query").focus();
  else $("main").focus();
}

/** Why a refused (401) token was refused, said to the person at the page. The server's
 * reason is for the platform's engineers (it names its settings and `memstrata token`,
 * docs/API.md): the page tells only what its user can act on, read from the token itself. */
function refusal(candidate) {
  const read = claims(candidate);
  if (!read) return "That is not a sign-in token. Copy it again, whole and without quotes.";
  if (typeof read.exp === "number" && read.exp * 1000 <= Date.now()) {
    return "This sign-in token has expired. Ask for a new one.";
  }
  return "This sign-in token is not valid or has expired. Ask for a new one.";
}

/** Return to sign-in when the token expires; a far `exp` takes several timers. */
function expireAt(when) {
  const left = when - Date.now();
  if (left > MAX_DELAY) {
    expiry = setTimeout(() => expireAt(when), MAX_DELAY);
    return;
  }
  expiry = setTimeout(() => {
    token.clear();
    signedOut(`Your token expired. Sign in with a new one. ${KEPT}`);
  }, Math.max(0, left));
}

onUnauthorized(() => {
  const exp = claims(token.get() ?? "")?.exp;
  token.clear();
  if (typeof exp === "number" && exp * 1000 <= Date.now()) {
    signedOut(`Your token expired. Sign in with a new one. ${KEPT}`);
  } else {
    signedOut(`You were signed out: this sign-in token is no longer accepted. Sign in again with a new one. ${KEPT}`);
  }
});

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  // A JWT never holds whitespace: a token copied across wrapped lines gets some.
  const candidate = $("token").value.replace(/^\s*bearer\s+/i, "").replace(/\s+/g, "");
  let refused = "";
  if (!candidate) refused = "Paste your access token first.";
  // fetch cannot send these in a header at all; caught here, they are not a network error
  else if (/[^\x21-\x7e]/.test(candidate)) {
    refused = "This token contains characters a token cannot have; copy it again.";
  }
  if (refused) {
    banner($("signin-error"), refused, "error");
    $("token").focus();
    return;
  }
  signIn(candidate);
});

$("signout").addEventListener("click", () => {
  // kept drafts too: signing out clears them from this browser (files.reset)
  if (files.hasDrafts() && !confirm("You have unsaved changes. Sign out and discard them?")) return;
  token.clear();
  user = null;
  // nothing of this user stays in the page, hidden or not
  files.reset();
  skills.reset();
  search.reset();
  signedOut("Signed out.", "info");
});

window.addEventListener("hashchange", route);

// The heights of what sticks at the top (the header, and in the files view the file tabs
// and the file bar), for the stylesheet's sticky offsets and scroll-padding: each wraps to
// two rows on a narrow screen (or at a high zoom), so no fixed number fits every layout.
const STUCK = { "--bar-height": "header.bar", "--tabs-height": "#file-tabs", "--filebar-height": ".filebar" };
const stuck = new ResizeObserver(() => {
  for (const [name, selector] of Object.entries(STUCK)) {
    const height = Math.ceil(document.querySelector(selector).getBoundingClientRect().height);
    document.documentElement.style.setProperty(name, `${height}px`);
  }
});
for (const selector of Object.values(STUCK)) stuck.observe(document.querySelector(selector));

// "Skip to content" moves the focus into the view on screen; following its #main link
// would only change the hash.
document.querySelector("a.skip").addEventListener("click", (event) => {
  event.preventDefault();
  $("main").focus();
});

document.addEventListener("keydown", (event) => {
  // (`key?.`: a keydown from autofill has no key)
  const ctrlS = (event.ctrlKey || event.metaKey) && event.key?.toLowerCase() === "s";
  if (!ctrlS || $("files-view").hidden) return;
  event.preventDefault(); // never the browser's "Save page as"
  // An input method (Japanese, Chinese, Korean…) is composing: the editor holds its
  // unfinished text, which is not the user's yet. keyCode 229 is a key the input method
  // handled, in browsers that leave isComposing false on it.
  if (event.isComposing || event.keyCode === 229) return;
  files.save();
});

window.addEventListener("beforeunload", (event) => {
  if (!files.hasUnsaved()) return;
  event.preventDefault();
  event.returnValue = "";
});

files.wire();
search.wire();
skills.wire();
const stored = token.get();
if (stored) signIn(stored);
else signedOut("", "info");
