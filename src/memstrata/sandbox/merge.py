"""Line-based three-way merge, the tie-breaker when the agent and a human edit one file.

``merge3(base, ours, theirs)`` returns the merged text, or ``None`` when the two sides
changed the same or neighbouring lines differently; ``merge3_parts`` then says which regions
those are, with the rest merged, for a person to resolve (the web page's re-apply). The rule
follows ``diff3``/git:

* each side's changes are computed against ``base`` as hunks (a base line range and its
  replacement lines);
* hunks whose base ranges overlap *or touch* form one region — touching counts, because
  a line inserted next to another side's edit is often one thought rewritten twice, and
  guessing an order for them is how merges silently garble text;
* a region changed by one side only takes that side's text; a region changed by both
  merges cleanly when both sides produce identical text there; when each side replaced
  or removed lines of its own — no line changed by both, no line only inserted at the
  seam — each side's lines go in place: there is no order to guess, and a file of one fact
  a line (the USER.md template's "- Pronouns:" above "- Time zone:") is filled in by two
  people field by field; otherwise the region conflicts — or when it is the
  file's end and both sides only added lines after the last non-blank line (anywhere in
  a blank file: its first entries): memory files grow by appending, and two appends are
  two new entries, so both are kept, the stored side's (``theirs``) first, and a block
  that already starts with the other's is taken alone (no entry twice).

Lines are the pieces between ``\\n`` characters, so a missing final newline is just a
shorter last line and never causes a spurious conflict with an edit on the line before.

A merge that conflicts is tried once more with both sides in the base's form
(:func:`_in_form_of`): its line breaks (when they are all LF or all CR LF) and, when the
base is NFC, NFC. A side that re-saved the whole file with CR LF (an agent on Windows) or in
NFD (macOS) changed every line, or every accented one, without changing a word, and would
otherwise turn any edit of the other side into a conflict. A merge found so is in the
base's form; a side's own line breaks and normalisation are not kept, its words are.

Side by side comes next, when the merge by regions conflicts both as the texts are and
in the base's form: the same region merge letting each side's replaced lines sit in place
(above), as the texts are, then in the base's form. Tried before the retry in the base's
form, it would take a side re-saved in NFD, whose every accented line is a replacement of
its own, for edits to merge line by line, and keep that side's form where the retry gives
the base's. The append rule is the last resort, as the texts are, then in the base's form.
It keeps each side's block whole, one after the other, where a region merge keeps each edit
in place; tried first, it took two edits on distant (or, side by side, neighbouring) lines
of a blank file, one side re-saved with CR LF, for two appends.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

from diff_match_patch import diff_match_patch

# A line diff gives up refining after this long (see _line_changes); two per merge, four
# when a conflict is tried again in the base's form.
DIFF_TIMEOUT_S = 0.25
# The diff codes each distinct line as one character (``_as_chars``): Unicode has this
# many besides the surrogates. More distinct lines than that (a file of over a million
# lines, only ever written into a sandbox) are diffed as one region.
MAX_DISTINCT_LINES = 0x10FFFF - 0x800


@dataclass(frozen=True)
class _Hunk:
    start: int  # base line range [start, end) replaced by ``lines``
    end: int
    lines: tuple[str, ...]
    side: int  # 0 = ours, 1 = theirs


def merge3(base: str, ours: str, theirs: str, *, appends: bool = True) -> str | None:
    """Merge two edits of ``base``; ``None`` on a conflict (see the module doc).
    ``appends``: whether the append rule may end a conflict; off when the caller cannot
    tell two appends from one block appended by one side and changed by the other."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    lines = base.split("\n")
    exact = _sorted_hunks(lines, ours, theirs)
    merged = _merge_regions(lines, exact, len(lines))
    if merged is not None:
        return "\n".join(merged)
    alike = _in_form_of(base, ours), _in_form_of(base, theirs)
    # Already in the base's form, the sides would give the same hunks again.
    in_form = None if alike == (ours, theirs) else _sorted_hunks(lines, *alike)
    if in_form is not None:
        merged = _merge_regions(lines, in_form, len(lines))
    # Side by side once no region merge is clean, then the append rule (module doc).
    if merged is None:
        merged = _merge_regions(lines, exact, len(lines), side_by_side=True)
    if merged is None and in_form is not None:
        merged = _merge_regions(lines, in_form, len(lines), side_by_side=True)
    if merged is None and appends:
        merged = _merge_appends(lines, exact)
    if merged is None and in_form is not None and appends:
        merged = _merge_appends(lines, in_form)
    return None if merged is None else "\n".join(merged)


def _in_form_of(base: str, text: str) -> str:
    """``text`` with ``base``'s line breaks, unless the base mixes LF and CR LF, and in
    NFC when the base is NFC (the merge's retry, module doc)."""
    crlf = base.count("\r\n")
    if crlf == 0 or crlf == base.count("\n"):
        text = text.replace("\r\n", "\n")
        if crlf:
            text = text.replace("\n", "\r\n")
    if unicodedata.is_normalized("NFC", base):
        text = unicodedata.normalize("NFC", text)
    return text


def _sorted_hunks(base: Sequence[str], ours: str, theirs: str) -> list[_Hunk]:
    """Both sides' hunks against the ``base`` lines, in the order regions are read."""
    hunks = _hunks(base, ours.split("\n"), 0) + _hunks(base, theirs.split("\n"), 1)
    return sorted(hunks, key=lambda h: (h.start, h.end, h.side))


@dataclass(frozen=True)
class Conflict:
    """A region :func:`merge3_parts` leaves to a person: base lines ``base`` (``[from, to)``,
    0-based, of the text split at ``\\n``) became ``ours_lines`` (lines ``ours`` of ``ours``)
    on one side and ``theirs_lines`` (lines ``theirs`` of ``theirs``) on the other."""

    base: tuple[int, int]
    ours: tuple[int, int]
    theirs: tuple[int, int]
    ours_lines: tuple[str, ...]
    theirs_lines: tuple[str, ...]


# A run of merged lines, or a region the merge left to a person.
MergePart = tuple[str, ...] | Conflict


def merge3_parts(base: str, ours: str, theirs: str) -> list[MergePart]:
    """The texts merged region by region as :func:`merge3` merges them — as they are, each
    side's replaced lines in place (``side_by_side``) — with every region it gives up on
    kept as a :class:`Conflict` instead of failing the whole merge: what a person resolves
    when ``merge3`` returns ``None`` (there is then at least one). The lines of all parts,
    each conflict resolved, joined with ``\\n``, are the text."""
    lines = base.split("\n")
    parts: list[MergePart] = []
    run: list[str] = []
    position = 0
    shift = [0, 0]  # how many lines each side's hunks so far added (or removed, < 0)
    for start, end, region in _regions(_sorted_hunks(lines, ours, theirs)):
        run.extend(lines[position:start])
        position = end
        text = _region_text(lines, start, end, region, side_by_side=True)
        if text is not None:
            run.extend(text)
            for side in (0, 1):
                shift[side] += _growth(region, side)
            continue
        sides = [_apply(lines, start, end, [h for h in region if h.side == s]) for s in (0, 1)]
        at = [start + shift[0], start + shift[1]]
        if run:
            parts.append(tuple(run))
            run = []
        parts.append(
            Conflict(
                (start, end),
                (at[0], at[0] + len(sides[0])),
                (at[1], at[1] + len(sides[1])),
                tuple(sides[0]),
                tuple(sides[1]),
            )
        )
        for side in (0, 1):
            shift[side] += len(sides[side]) - (end - start)
    run.extend(lines[position:])
    if run:
        parts.append(tuple(run))
    return parts


def _growth(region: Sequence[_Hunk], side: int) -> int:
    """How many lines ``side``'s hunks of ``region`` add (fewer than 0: remove)."""
    return sum(len(h.lines) - (h.end - h.start) for h in region if h.side == side)


def _regions(hunks: Sequence[_Hunk]) -> Iterator[tuple[int, int, list[_Hunk]]]:
    """The sorted ``hunks`` grouped into regions: base lines ``[start, end)`` and the hunks
    (of either side) that overlap or touch them."""
    index = 0
    while index < len(hunks):
        start, end = hunks[index].start, hunks[index].end
        region = [hunks[index]]
        index += 1
        # Sorted by start, so "touches the region" is simply "starts at or before its end".
        while index < len(hunks) and hunks[index].start <= end:
            region.append(hunks[index])
            end = max(end, hunks[index].end)
            index += 1
        yield start, end, region


def _region_text(
    base: Sequence[str], start: int, end: int, region: Sequence[_Hunk], *, side_by_side: bool
) -> list[str] | None:
    """Base lines ``[start, end)`` merged with ``region``'s hunks; ``None`` when its two
    sides differ (unless ``side_by_side`` and :func:`_side_by_side` holds: both sides'
    lines in place)."""
    ours_text = _apply(base, start, end, [h for h in region if h.side == 0])
    theirs_text = _apply(base, start, end, [h for h in region if h.side == 1])
    if {h.side for h in region} != {0, 1} or ours_text == theirs_text:
        return ours_text if any(h.side == 0 for h in region) else theirs_text
    if side_by_side and _side_by_side(region):
        return _apply(base, start, end, region)
    return None


def _merge_regions(
    base: Sequence[str], hunks: Sequence[_Hunk], upto: int, *, side_by_side: bool = False
) -> list[str] | None:
    """``base[:upto]`` with the sorted ``hunks`` (all within it) applied region by region;
    ``None`` when a region's two sides differ (:func:`_region_text`)."""
    merged: list[str] = []
    position = 0
    for start, end, region in _regions(hunks):
        text = _region_text(base, start, end, region, side_by_side=side_by_side)
        if text is None:
            return None
        merged.extend(base[position:start])
        merged.extend(text)
        position = end
    merged.extend(base[position:upto])
    return merged


def _side_by_side(region: Sequence[_Hunk]) -> bool:
    """Whether both sides' hunks of a sorted ``region`` only replace or remove base lines
    (none a pure insertion, whose place next to the other side's edit is a guess) and no
    base line is changed by both: then applying them all in base order is the merge."""
    if any(h.start == h.end for h in region):
        return False
    return all(a.end <= b.start for a, b in pairwise(region))


def _merge_appends(base: Sequence[str], hunks: Sequence[_Hunk]) -> list[str] | None:
    """The merge when both sides added lines after the file's last non-blank line: the
    changes before it merged as usual (none may reach it: an edit of the last line next
    to an append is still a conflict), then both appends (``_both_appends``)."""
    at = _content_end(base)
    head = [h for h in hunks if h.start < at]
    if any(h.end >= at for h in head):
        return None
    merged = _merge_regions(base, head, at)
    if merged is None:
        return None
    return merged + _both_appends(base, at, [h for h in hunks if h.start >= at])


def _both_appends(base: Sequence[str], blank_from: int, hunks: Sequence[_Hunk]) -> list[str]:
    """The file's end from ``blank_from`` (where only blank lines are left in ``base``)
    when both sides' ``hunks`` added to it: ``theirs``' lines then ``ours``', each with the
    blank lines it starts with — or the one that already starts with the other (a side
    that copied the other's entry before adding its own); a final newline if either side
    ends with one. When neither side added a non-blank line, the longer run of blank
    lines: stripped, both blocks are empty, and the base's own blank lines would go too."""
    ours, theirs = (
        _apply(base, blank_from, len(base), [h for h in hunks if h.side == side]) for side in (0, 1)
    )
    if not any(ours + theirs):
        return max(theirs, ours, key=len)
    ending = [""] if "" in (ours[-1:] + theirs[-1:]) else []
    ours, theirs = _strip_blank_end(ours), _strip_blank_end(theirs)
    if ours[: len(theirs)] == theirs:
        return ours + ending
    if theirs[: len(ours)] == ours:
        return theirs + ending
    return theirs + ours + ending


def _strip_blank_end(lines: list[str]) -> list[str]:
    return lines[: _content_end(lines)]


def _content_end(lines: Sequence[str]) -> int:
    """The index after the last non-blank line."""
    end = len(lines)
    while end and not lines[end - 1]:
        end -= 1
    return end


def _hunks(base: Sequence[str], other: Sequence[str], side: int) -> list[_Hunk]:
    # Common prefix and suffix are trimmed first: with repeated lines (blank lines, "- a")
    # a diff may align a block one line off, turning a one-line edit into an insertion
    # plus a distant deletion that then conflicts with the other side for nothing.
    prefix = 0
    limit = min(len(base), len(other))
    while prefix < limit and base[prefix] == other[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and base[-1 - suffix] == other[-1 - suffix]:
        suffix += 1
    base_mid = base[prefix : len(base) - suffix]
    other_mid = other[prefix : len(other) - suffix]
    return [
        _Hunk(prefix + start, prefix + end, tuple(other_mid[first:last]), side)
        for start, end, (first, last) in _line_changes(base_mid, other_mid)
    ]


def _line_changes(
    base: Sequence[str], other: Sequence[str]
) -> list[tuple[int, int, tuple[int, int]]]:
    """The changed regions of a line diff: base lines ``[start, end)`` replaced by other
    lines ``[i, j)``. Myers' diff (diff-match-patch) over one character per distinct line,
    with a deadline: difflib's matcher took 35 s on 2,000 alternating short lines (its
    cost grows with repetition, and memory files repeat "" and "- …" lines), a stall any
    writer of a file could cause. Past ``DIFF_TIMEOUT_S`` the diff is coarser, never
    wrong: larger regions, so a merge may conflict where a finer diff would not."""
    codes: dict[str, str] = {}
    a = _as_chars(base, codes)
    b = None if a is None else _as_chars(other, codes)
    if a is None or b is None:
        return [(0, len(base), (0, len(other)))]  # one coarse region: never wrong
    differ = _Differ()
    differ.Diff_Timeout = DIFF_TIMEOUT_S
    changes: list[tuple[int, int, tuple[int, int]]] = []
    i = j = 0
    open_at: tuple[int, int] | None = None
    for op, chars in differ.diff_main(a, b, checklines=False):
        n = len(chars)
        if op == diff_match_patch.DIFF_EQUAL:
            if open_at is not None:
                changes.append((open_at[0], i, (open_at[1], j)))
                open_at = None
            i, j = i + n, j + n
            continue
        if open_at is None:
            open_at = (i, j)
        if op == diff_match_patch.DIFF_DELETE:
            i += n
        else:
            j += n
    if open_at is not None:
        changes.append((open_at[0], i, (open_at[1], j)))
    return changes


class _Differ(diff_match_patch):  # type: ignore[misc]  # the library has no type hints
    """Myers' bisection alone. The library's "half match" speed-up runs before it and
    outside the deadline, and its substring search is quadratic on repetitive text
    (6 s of 6.3 on 120,000 alternating lines)."""

    def diff_halfMatch(self, text1: str, text2: str) -> None:
        return None


def _as_chars(lines: Sequence[str], codes: dict[str, str]) -> str | None:
    """One character per line, the same one for equal lines (surrogates skipped); None
    once ``codes`` holds ``MAX_DISTINCT_LINES`` lines and another distinct one comes."""
    out = []
    for line in lines:
        char = codes.get(line)
        if char is None:
            n = len(codes) + 1
            if n > MAX_DISTINCT_LINES:
                return None
            char = codes[line] = chr(n + 0x800 if n >= 0xD800 else n)
        out.append(char)
    return "".join(out)


def _apply(base: Sequence[str], start: int, end: int, hunks: Sequence[_Hunk]) -> list[str]:
    """Base lines ``[start, end)`` with one side's hunks applied."""
    out: list[str] = []
    position = start
    for hunk in hunks:
        out.extend(base[position : hunk.start])
        out.extend(hunk.lines)
        position = hunk.end
    out.extend(base[position:end])
    return out
