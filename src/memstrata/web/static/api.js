// The page's only way to the server: the public REST API (and the page's own web/merge,
// the server's three-way merge), with the tab's bearer token.
// The token is kept in sessionStorage (this tab only, gone when it closes) and is only
// ever sent in the Authorization header.

import { asSentence, bdi, sentence } from "./dom.js";

const TOKEN_KEY = "memstrata.token";

// Said to end users, who do not run the server: no browser internals, no server settings.
const UNREACHABLE = "Could not reach the server. Check your connection and try again.";

export class ApiError extends Error {
  constructor(status, body, message, { unsent = false } = {}) {
    super(message);
    this.status = status; // 0 when the server could not be reached
    // the browser was offline when the request was made: it never left (status 0)
    this.unsent = unsent;
    this.body = body;
    // false when the body had no text for people (a proxy's 502 page, say): `message` is
    // then only "HTTP 502 Bad Gateway"
    this.told = Boolean(serverText(body));
  }
}

/** Why a call failed, as whole sentences for the page to show after its own: a list of
 * parts for `banner` (spread it into the page's own list). The server's text is in a `bdi`
 * (dom.js): a name or id it echoes, with right-to-left letters or bidi controls, cannot
 * reorder the page's words around it. */
export function reason(error) {
  if (error.status === 0) return [UNREACHABLE];
  if (error.told) return [bdi(asSentence(error.message))];
  return error.status >= 500
    ? ["The server had an error (", bdi(error.message), ")."]
    : ["The server refused the request (", bdi(error.message), ")."];
}

/** The server's own words about a failure, isolated (as in `reason`), as one sentence. */
export const serverSentence = (error) => bdi(sentence(error.message));

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

let unauthorized = () => {};

/** Called with the ApiError when a signed-in request gets 401 (expired or revoked token). */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

/**
 * One API call. Resolves to {data, response}; rejects with ApiError carrying a message
 * meant for people (the server's `message` or `detail`, whichever the error body has).
 * `bearer` overrides the stored token (sign-in tries a token before keeping it).
 */
export async function api(method, path, { body, headers = {}, bearer } = {}) {
  const credential = bearer ?? token.get() ?? "";
  const init = {
    method,
    headers: { Accept: "application/json", Authorization: `Bearer ${credential}`, ...headers },
    cache: "no-store",
    credentials: "omit",
  };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  const offline = navigator.onLine === false;
  try {
    response = await fetch(new URL(path, document.baseURI), init);
  } catch {
    // The browser's own text ("Failed to fetch") means nothing to the people reading it.
    throw new ApiError(0, null, UNREACHABLE, { unsent: offline });
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (response.ok) return { data, response };
  const error = new ApiError(response.status, data, errorText(response, data));
  if (response.status === 401 && bearer === undefined) unauthorized(error);
  throw error;
}

/** The people-readable part of an error body; tolerant of `{detail}` and `{code, message}`. */
export function errorText(response, data) {
  return serverText(data) || `HTTP ${response.status} ${response.statusText || ""}`.trim();
}

function serverText(data) {
  if (!data || typeof data !== "object") return "";
  if (typeof data.message === "string" && data.message && data.message !== "ok") return data.message;
  if (typeof data.detail === "string" && data.detail) return data.detail;
  if (Array.isArray(data.detail)) {
    return data.detail.map((d) => (d && d.msg) || JSON.stringify(d)).join("; ");
  }
  return "";
}

/** The claims of a JWT, unverified: only to show when it expires. Null if unreadable. */
export function claims(jwt) {
  try {
    const part = jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), "=")));
  } catch {
    return null;
  }
}
