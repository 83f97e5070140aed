// A line diff (Myers' O(ND) algorithm) and its side-by-side rows, for the conflict view.
// Written here rather than vendored: the page needs ~80 lines of it, and a library would
// be a second thing to keep updated and audit. It only draws the differences: merging
// (re-apply) is the server's rule, asked for with POST web/merge (file-conflict.js).

// Beyond this many line edits (removed plus added) between lines the two texts share, the
// diff is not worth the time, nor much use to read: `diffLines` says so (null) and the
// conflict view says the versions differ too much to compare line by line, rather than
// marking every line, identical ones too, as changed.
export const MAX_EDITS = 1000;

/** Ops turning `a` into `b` (arrays of lines): {op: "=", a, b} | {op: "-", a} | {op: "+", b};
 * null when that takes more than MAX_EDITS edits among lines both texts hold. */
export function diffLines(a, b) {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const differing = middle(a, b, start, endA, start, endB);
  if (!differing) return null;
  const ops = [];
  for (let i = 0; i < start; i++) ops.push({ op: "=", a: i, b: i });
  ops.push(...differing);
  for (let i = 0; endA + i < a.length; i++) ops.push({ op: "=", a: endA + i, b: endB + i });
  return ops;
}

/** A lower bound on the edits between a[a0, a1) and b[b0, b1), in linear time: a line one
 * side holds more often than the other is removed or added that many times over. It spares
 * the quadratic search for texts that differ everywhere (an agent's rewrite of every other
 * line of a 15,000-line file took the page 18 s to find past the limit). */
function fewestEdits(a, b, a0, a1, b0, b1) {
  const count = new Map();
  for (let i = a0; i < a1; i++) count.set(a[i], (count.get(a[i]) ?? 0) + 1);
  for (let i = b0; i < b1; i++) count.set(b[i], (count.get(b[i]) ?? 0) - 1);
  let edits = 0;
  for (const n of count.values()) edits += Math.abs(n);
  return edits;
}

function middle(a, b, a0, a1, b0, b1) {
  const n = a1 - a0;
  const m = b1 - b0;
  const fewest = n && m ? fewestEdits(a, b, a0, a1, b0, b1) : n + m;
  // no line in common: every line is removed or added, however many (a block replaced)
  if (fewest === n + m) {
    return [
      ...Array.from({ length: n }, (_, i) => ({ op: "-", a: a0 + i })),
      ...Array.from({ length: m }, (_, i) => ({ op: "+", b: b0 + i })),
    ];
  }
  if (fewest > MAX_EDITS) return null;
  const limit = Math.min(n + m, MAX_EDITS);
  const offset = limit + 1;
  const v = new Int32Array(2 * limit + 3);
  const trace = [];
  let done = false;
  for (let d = 0; d <= limit && !done; d++) {
    trace.push(v.slice());
    for (let k = -d; k <= d; k += 2) {
      let x =
        k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1])
          ? v[offset + k + 1]
          : v[offset + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[a0 + x] === b[b0 + y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) {
        done = true;
        break;
      }
    }
  }
  if (!done) return null;
  const ops = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const prev = trace[d];
    const k = x - y;
    const prevK =
      k === -d || (k !== d && prev[offset + k - 1] < prev[offset + k + 1]) ? k + 1 : k - 1;
    const prevX = prev[offset + prevK];
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      x--;
      y--;
      ops.push({ op: "=", a: a0 + x, b: b0 + y });
    }
    if (d > 0) {
      if (x === prevX) ops.push({ op: "+", b: b0 + y - 1 });
      else ops.push({ op: "-", a: a0 + x - 1 });
    }
    x = prevX;
    y = prevY;
  }
  return ops.reverse();
}

/**
 * Rows for a two-column view: each {left, right}, a side being {line, text, kind} or null.
 * Runs of removed and added lines are paired so a changed line sits beside its new form.
 */
export function sideBySide(ops, a, b) {
  const rows = [];
  let removed = [];
  let added = [];
  const flush = () => {
    for (let i = 0; i < Math.max(removed.length, added.length); i++) {
      const l = removed[i];
      const r = added[i];
      rows.push({
        left: l === undefined ? null : { line: l + 1, text: a[l], kind: "removed" },
        right: r === undefined ? null : { line: r + 1, text: b[r], kind: "added" },
      });
    }
    removed = [];
    added = [];
  };
  for (const op of ops) {
    if (op.op === "-") removed.push(op.a);
    else if (op.op === "+") added.push(op.b);
    else {
      flush();
      rows.push({
        left: { line: op.a + 1, text: a[op.a], kind: "same" },
        right: { line: op.b + 1, text: b[op.b], kind: "same" },
      });
    }
  }
  flush();
  return rows;
}

export const splitLines = (text) => (text === "" ? [] : text.replace(/\r\n/g, "\n").split("\n"));
