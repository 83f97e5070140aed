// What the files modules share: one state object and the rules read from it. No DOM and no
// requests here, so every files module can import it without importing each other in a
// circle. The user's text lives in `draft` until the server has it.

const encoder = new TextEncoder();

export const state = { limits: null, files: new Map(), current: null, saving: false, focus: false };

export const size = (text) => encoder.encode(text).length;
export const dirty = (f) => f.loaded && f.draft !== f.base;
// the Save button's rule, which Ctrl+S follows too: an unchanged file is not written again
export const canSave = (f) => f.loaded && !state.saving && !f.conflict && dirty(f);
// text set aside by "re-apply" that the user has not yet saved or dismissed
export const setAside = (f) => f.kept !== null && f.keptPending;
export const path = (f) => `api/config/agent-files/${encodeURIComponent(f.name)}`;
export const current = () => state.files.get(state.current);
