// What the files modules share: one state object and the rules read from it. No DOM and no
// requests here, so every files module can import it without importing each other in a
// circle. The user's text lives in `draft` until the server has it.

const encoder = new TextEncoder();

// `merging`: a re-apply is waiting for the server's merge (file-conflict.js); `user`: who is
// signed in, whose drafts are kept (file-drafts.js)
export const state = {
  user: null, limits: null, files: new Map(), current: null, saving: false, merging: false, focus: false,
};

// Line endings. A textarea turns every CR LF (and lone CR) into LF, so the page keeps each
// file's text in that form (`base`, `draft`, a conflict's texts) and remembers the file's
// own style in `f.eol`: a file whose every line break was CR LF (an agent on Windows wrote
// it) is written back with CR LF, not silently converted by one typed character. A lone CR
// is a line break too: a file that has one is mixed, written back with LF (with CR LF, each
// lone CR grew by a byte the user never typed, and a file the server stored at its limit
// was over it in the page).
export const editorText = (stored) => stored.replace(/\r\n?/g, "\n");
export const eolOf = (stored) =>
  (/\r\n/.test(stored) && !/(^|[^\r])\n|\r(?!\n)/.test(stored) ? "\r\n" : "\n");
/** The text as it is sent to (and stored by) the server. */
export const storedText = (f, text) => (f.eol === "\r\n" ? text.replace(/\n/g, "\r\n") : text);

export const size = (text) => encoder.encode(text).length;
/** Bytes of the text as the server counts them (UTF-8, as stored: no newline is changed):
 * the stored text itself while the file is unedited (`f.stored`, the last text read or
 * saved, whose mixed line breaks the editor's LF cannot give back), else the text a save
 * sends (a conflict's: the user's). */
export const used = (f) => (f.conflict || dirty(f) || f.stored === null
  ? size(storedText(f, f.conflict ? f.conflict.mine : f.draft))
  : size(f.stored));
// over the server's limit: a save would be refused (413), so the page does not offer one
export const tooLarge = (f) => f.loaded && used(f) > state.limits.max_content_bytes;
export const dirty = (f) => f.loaded && f.draft !== f.base;
// the Save button's rule, which Ctrl+S follows too: an unchanged file is not written again
// (not while places of a re-apply are being chosen, nor while kept text is offered back)
export const canSave = (f) =>
  f.loaded && !state.saving && !f.conflict && !f.resolve && !f.offer && dirty(f) && !tooLarge(f);
/** A stored version (`{content}`) that holds exactly the user's text — the draft, or a
 * conflict's — is their own save that landed after its answer was lost (a gateway's
 * timeout, a restart), or another writer's identical text: the same outcome, no conflict. */
export const holdsMine = (f, stored) =>
  editorText(stored.content) === (f.conflict ? f.conflict.mine : f.draft);
/** Nothing but spaces and line breaks: saving it empties the file. */
export const blank = (text) => !/\S/.test(text);
// text set aside by "re-apply" that the user has not yet saved or dismissed
export const setAside = (f) => f.kept !== null && f.keptPending;
export const path = (f) => `api/config/agent-files/${encodeURIComponent(f.name)}`;
export const current = () => state.files.get(state.current);
