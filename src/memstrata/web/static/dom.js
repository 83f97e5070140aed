// Tiny DOM helpers. Every server string goes in as text (textContent), never as HTML.

export const $ = (id) => document.getElementById(id);

/** `text` ending as a sentence: a full stop added unless it already ends with one (or ?/!). */
export const sentence = (text) => (/[.?!]$/.test(text) ? text : `${text}.`);

/** A server's clause ("the database is unavailable") as a sentence of its own. */
export const asSentence = (text) => sentence(text.charAt(0).toUpperCase() + text.slice(1));

/** el("li", {class: "x", onclick: f}, "text", child) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Text from the data (a user id, a session id, a path) among the page's own words: a
 * `<bdi>`, which takes the direction of its own first letter, so that right-to-left letters
 * or bidi control characters in it cannot reorder the words around it. app.css makes it an
 * inline-block, a bidi paragraph of its own: a PDI in the text cannot end the isolation early. */
export const bdi = (text) => el("bdi", {}, text);

/** The same for plain text (a dialog, a tooltip): first-strong isolates (U+2068 … U+2069)
 * around `text`, without its PDIs that close no isolate of its own (one would end this one
 * early) and with a PDI for each isolate it leaves open. */
export function isolated(text) {
  let open = 0;
  let kept = "";
  for (const char of String(text)) {
    if (char === "\u2069") {
      if (!open) continue;
      open -= 1;
    } else if (/[\u2066-\u2068]/.test(char)) open += 1;
    kept += char;
  }
  return `\u2068${kept}${"\u2069".repeat(open)}\u2069`;
}

/** Show a banner paragraph with a kind (error, warn, ok, info); empty text hides it. `text`
 * is a string, or a list of strings and nodes (an id, or the server's words, in a `bdi`). */
export function banner(node, text, kind = "info") {
  node.replaceChildren(...[text || ""].flat(Infinity));
  node.hidden = !node.textContent;
  node.className = `banner ${kind}`;
  node.setAttribute("role", kind === "error" ? "alert" : "status");
}

// Letters of the scripts that need a language tag to be shown (and read aloud) right: the
// same Han character is drawn differently in Chinese and Japanese fonts.
const HAN = /\p{Script=Han}/gu;
const KANA = /[\p{Script=Hiragana}\p{Script=Katakana}]/gu;
const HANGUL = /\p{Script=Hangul}/gu;
const LETTER = /\p{L}/gu;

/** A `lang` for text written mostly in Chinese, Japanese or Korean (the page is `en`), else
 * null. A plain count of scripts, not language detection: kana means Japanese, hangul
 * Korean, Han alone Chinese. */
export function cjkLang(text) {
  const letters = (text.match(LETTER) || []).length;
  const han = (text.match(HAN) || []).length;
  const hangul = (text.match(HANGUL) || []).length;
  const kana = (text.match(KANA) || []).length;
  if (!letters || 2 * (han + hangul + kana) <= letters) return null;
  if (kana) return "ja";
  return hangul > han ? "ko" : "zh";
}

const BYTE_FORMAT = new Intl.NumberFormat("en-US");

export function bytes(n) {
  if (n < 1024) return `${BYTE_FORMAT.format(n)} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10 * 1024 ? 1 : 0)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export const number = (n) => BYTE_FORMAT.format(n);

export function when(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return { text: String(iso), title: String(iso) };
  const days = (Date.now() - date.getTime()) / 86_400_000;
  let ago;
  if (days < 1 / 24) ago = "just now";
  else if (days < 1) ago = `${Math.round(days * 24)} h ago`;
  else if (days < 60) ago = `${Math.round(days)} days ago`;
  else ago = `${Math.round(days / 30)} months ago`;
  return { text: `${date.toLocaleString()} · ${ago}`, title: date.toISOString() };
}
