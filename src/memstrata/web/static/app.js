// The page's entry point: sign-in, the three views, leaving with unsaved changes.

import { api, claims, onUnauthorized, token } from "./api.js";
import { $, banner } from "./dom.js";
import * as files from "./files.js";
import * as search from "./search.js";
import * as skills from "./skills.js";

const VIEWS = ["files", "skills", "search"];
const KEPT = "Unsaved edits stay in this page until you close it.";
let user = null; // the user id of the last sign-in: drafts are kept only for the same user
let expiry = null;

function route() {
  if (!token.get()) return;
  const wanted = location.hash.slice(1);
  const view = VIEWS.includes(wanted) ? wanted : "files";
  $("signin-view").hidden = true;
  for (const name of VIEWS) $(`${name}-view`).hidden = name !== view;
  for (const link of $("nav").querySelectorAll("a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function signedOut(message, kind = "error") {
  clearTimeout(expiry);
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  for (const name of VIEWS) $(`${name}-view`).hidden = true;
  $("signin-view").hidden = false;
  banner($("signin-error"), message, kind);
  $("token").value = "";
  $("token").focus();
}

async function signIn(candidate) {
  const submit = $("signin-submit");
  submit.disabled = true;
  let limits;
  try {
    ({ data: limits } = await api("GET", "api/config/limits", { bearer: candidate }));
  } catch (error) {
    token.clear();
    signedOut(error.status === 401
      ? `That token was refused: ${error.message}. Get a new one and try again.`
      : `Could not sign in: ${error.message}`);
    return;
  } finally {
    submit.disabled = false;
  }
  token.set(candidate);
  const keepDrafts = user === limits.user_id;
  user = limits.user_id;
  $("nav").hidden = false;
  $("signout").hidden = false;
  const exp = claims(candidate)?.exp;
  $("who").textContent = user;
  $("who").title = exp ? `signed in as ${user}; token expires ${new Date(exp * 1000).toLocaleString()}` : `signed in as ${user}`;
  banner($("signin-error"), "");
  clearTimeout(expiry);
  if (exp) {
    expiry = setTimeout(() => {
      token.clear();
      signedOut(`Your token expired. Sign in with a new one. ${KEPT}`);
    }, Math.min(Math.max(0, exp * 1000 - Date.now()), 2 ** 31 - 1));
  }
  files.init(limits, { keepDrafts });
  search.init(limits);
  skills.load();
  route();
}

onUnauthorized((error) => {
  token.clear();
  signedOut(`You were signed out: ${error.message}. Sign in again with a new token. ${KEPT}`);
});

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const candidate = $("token").value.trim().replace(/^bearer\s+/i, "");
  if (!candidate) {
    banner($("signin-error"), "Paste a token first (memstrata token --user <id> prints one).");
    return;
  }
  signIn(candidate);
});

$("signout").addEventListener("click", () => {
  if (files.hasUnsaved() && !confirm("You have unsaved changes. Sign out and discard them?")) return;
  token.clear();
  user = null;
  signedOut("Signed out.", "info");
});

window.addEventListener("hashchange", route);

document.addEventListener("keydown", (event) => {
  if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "s" && !$("files-view").hidden) {
    event.preventDefault();
    files.save();
  }
});

window.addEventListener("beforeunload", (event) => {
  if (!files.hasUnsaved()) return;
  event.preventDefault();
  event.returnValue = "";
});

files.wire();
search.wire();
const stored = token.get();
if (stored) signIn(stored);
else signedOut("", "info");
