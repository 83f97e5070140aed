"""Section-level edits of a memory file, as plain functions over its text.

A *section* is a level-2 heading line (``## Decisions``) and every line after it up to
the next level-1 or level-2 heading; deeper headings (``###``) belong to the section.
Which lines are headings — not those inside fenced code blocks, a byte-order mark before
the first line not hiding one — is :mod:`memstrata.agent.markdown_doc`'s reading, shared
with the entries and the prompt's cut. Names (and ``update_user``'s keys) compare by
:func:`fold` — NFKC, case-folded — ignoring surrounding whitespace and closing ``#``
characters, so an NFD, full-width or upper-case spelling finds the section an agent names
in NFC, half-width or lower case. A missing section is appended at the end of the file,
after one blank line. A ``- key: value`` bullet inside fenced code is an example, not a
fact: key lookups skip it. Lines added after a fence left open (which runs to the end of
the file) come after a line that closes it, so they are not code; so do lines added after
an HTML block only its end ends (``<!--`` without ``-->``), which runs on the same way. A
fence inside an entry needs none: the line added after it, an item or a heading at the
margin, ends the entry and the fence with it (a closing line at the margin would open a
fence instead).

Lines the edit adds take the file's line break (:func:`line_break`): a file whose every
line break is CR LF stays so, since the web editor writes a file back with CR LF only
then (docs/WEB.md "Line endings").

These functions never fail on odd input: whatever the file holds, the result is the same
file with one section changed. The tools validate arguments before calling them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from datetime import date

from rapidfuzz.distance import Levenshtein

from memstrata.agent import markdown_doc
from memstrata.agent.markdown_doc import Doc, Kind, Section

# A "- key: value" bullet up to its first ":", the key (perhaps "**key**") in group 1.
# Possessive, so that a long line without a colon fails in linear time.
_KEY_BULLET = re.compile(r"\s*+[-*+]\s++(?:\*\*)?+([^:]*+):")
DATE_PATTERN = r"\d{4}-\d{2}-\d{2}"  # an entry's date, as dated_bullet writes it
_DATE = re.compile(DATE_PATTERN)  # a dated entry's "- 2026-03-01: …" has no key
# The longest key of a "Key: value" line (MAX_NAME_CHARS), and the bullets it may follow.
_MAX_KEY_CHARS = 80
_BULLETS = ("-", "*", "+")


def fold(text: str) -> str:
    """``text`` as names and keys compare: NFKC, case-folded, NFKC again (case folding
    can undo a composition)."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    # Case folding makes Turkish İ an "i" plus a combining dot, which "iletişim" typed for
    # "İLETİŞİM" lacks (the search tokenizer drops the dot the same way).
    return folded.replace("i\u0307", "i").strip()


def normalise_name(name: str) -> str:
    """A section's name as names compare: folded, without the "#" runs a heading line
    opens and may close with ("## C# ##" and "C#" match; "C#" and "C" do not)."""
    return markdown_doc.title(fold(name).lstrip("#"))


def line_break(text: str) -> str:
    """CR LF when every line break of ``text`` is one, else LF: the web editor's rule
    (``file-state.js`` ``eolOf``), so a file it writes back with CR LF stays that way."""
    return "\r\n" if "\r\n" in text and text.count("\n") == text.count("\r\n") else "\n"


def _in_file_style(text: str, edit: Callable[[str], str]) -> str:
    """``edit`` applied to ``text`` with LF line breaks, its result written back in the
    line breaks of ``text``. Exact for a CR LF file: each LF had exactly one CR before it."""
    if line_break(text) == "\n":
        return edit(text)
    return edit(text.replace("\r\n", "\n")).replace("\n", "\r\n")


def _lf(text: str) -> str:
    # The agent's text may come with CR LF; its lines take the file's line break instead.
    return text.replace("\r\n", "\n")


def is_date(text: str) -> bool:
    return _DATE.fullmatch(text) is not None


def find_sections(doc: Doc, name: str) -> list[Section]:
    """Every level-2 section called ``name``, in file order. The tools edit only the first;
    a second one (an agent repeated a heading in a body) is worth telling the agent about."""
    wanted = normalise_name(name)
    return [section for section in doc.sections() if normalise_name(section.title) == wanted]


def find_section(doc: Doc, name: str) -> Section | None:
    """The first level-2 section called ``name``, or None."""
    found = find_sections(doc, name)
    return found[0] if found else None


def section_titles(doc: Doc) -> list[str]:
    """The names of the level-2 sections, as spelled in the file, in file order."""
    return [section.title for section in doc.sections()]


def close_names(name: str, titles: list[str]) -> list[str]:
    """The titles an agent probably meant by ``name``: folded, at most two edits apart
    (``Decision`` for ``Decisions``), or one a whole word of the other (``User Profile``
    for ``Profile``)."""
    wanted = normalise_name(name)
    close: list[str] = []
    for title in titles:
        folded = normalise_name(title)
        if folded == wanted or title in close:
            continue
        shorter, longer = sorted((folded, wanted), key=len)
        if _edits_within(folded, wanted, 2) or (len(shorter) >= 4 and shorter in longer.split()):
            close.append(title)
    return close


def _edits_within(a: str, b: str, limit: int) -> bool:
    """Whether the Levenshtein distance of ``a`` and ``b`` is at most ``limit``."""
    return Levenshtein.distance(a, b, score_cutoff=limit) <= limit


def without_own_heading(body: str, name: str) -> str:
    """``body`` without a first line that is section ``name``'s own heading (``## Decisions``
    for ``Decisions``, level 1 or 2): an agent that echoes it would add a second section
    of that name, which later edits never reach (they edit the first)."""
    doc = markdown_doc.parse(body)
    first = doc.blocks[0] if doc.blocks else None  # on the first line that is not blank
    if first is None or first.kind is not Kind.HEADING or first.level > 2:
        return body
    if normalise_name(first.title) != normalise_name(name):
        return body
    return "\n".join(doc.lines[first.start + 1 :])


def section_heading_in(body: str) -> str | None:
    """The first level-1 or level-2 heading line of ``body`` outside fenced code, or None:
    in a section body it would start a section of its own."""
    doc = markdown_doc.parse(body)
    return next((doc.lines[h.start].strip() for h in doc.headings() if h.level <= 2), None)


def _with_new_section(text: str, name: str, body: list[str]) -> str:
    head = "\n".join(_closing_open_fence(text.rstrip("\n").split("\n")))
    section = "\n".join([f"## {name.strip()}", *body]) + "\n"
    return f"{head}\n\n{section}" if head else section


def _closing_open_fence(lines: list[str]) -> list[str]:
    """``lines`` with a closing fence line after them if a fence is still open there. A
    fence a person left open runs to the end of the file, so lines added after it would be
    code: a new section the tools never find again (the next call would add it once more),
    an entry no duplicate check sees. Closing it at the end changes how nothing before it
    reads — CommonMark ends an open fence there too. So does an HTML block only its end
    ends (``<!--`` without ``-->``): the line that ends it is added the same way."""
    text = "\n".join(lines)
    closing = markdown_doc.open_fence(text) or markdown_doc.open_html(text)
    return lines if closing is None else [*lines, closing]


def append_to_section(text: str, name: str, entry: str) -> str:
    """Add ``entry`` after the last non-blank line of section ``name``."""
    return _in_file_style(text, lambda lf: _append(lf, name, _lf(entry)))


def _append(text: str, name: str, entry: str, doc: Doc | None = None) -> str:
    """``append_to_section`` of LF ``text``, parsed as ``doc`` if the caller has it; the
    first line of ``entry`` is a ``- `` item at the margin."""
    doc = markdown_doc.parse(text) if doc is None else doc
    lines = list(doc.lines)
    entry_lines = entry.split("\n")
    span = find_section(doc, name)
    if span is None:
        return _with_new_section(text, name, entry_lines)
    position = span.end
    while position > span.body_start and lines[position - 1].strip() == "":
        position -= 1
    head = lines[:position]
    if doc.open_fence or doc.open_html:  # open at ``position`` if opened in this section
        head = _closing_open_fence(head)
    if position - 1 in doc.to_blank:
        # The item added would be a line of the HTML block the section ends in (a
        # ``<div>`` or a lone tag runs to a blank line, as CommonMark reads it): an entry
        # no later call would find, nor its duplicate check see. A blank line ends the
        # block. (Any other block the section may end in ends at an item at the margin:
        # a quote, a block inside an entry, or one only its end ends, closed above.)
        entry_lines = ["", *entry_lines]
    return "\n".join(head + entry_lines + lines[position:])


def replace_section(text: str, name: str, body: str) -> str:
    """Replace the body of section ``name`` (the heading stays); empty ``body`` clears it."""
    return _in_file_style(text, lambda lf: _replace(lf, name, _lf(body)))


def _replace(text: str, name: str, body: str) -> str:
    doc = markdown_doc.parse(text)
    lines = doc.lines
    body_lines = body.strip("\n").split("\n") if body.strip() else []
    span = find_section(doc, name)
    if span is None:
        return _with_new_section(text, name, body_lines)
    # A blank line keeps the next heading apart; at the end of the file it is the final
    # newline.
    tail = lines[span.end :]
    return "\n".join([*lines[: span.body_start], *body_lines, "", *tail])


def replace_file(text: str, content: str) -> str:
    """``content`` as the whole new file, ending in a line break, in the line breaks of
    the file it replaces."""
    body = _lf(content)
    body = body if body.endswith("\n") else body + "\n"
    return body.replace("\n", "\r\n") if line_break(text) == "\r\n" else body


def set_key(text: str, name: str, key: str, value: str) -> str:
    """Set ``- key: value`` in section ``name``: the first bullet with that key (compared
    by :func:`fold`, optionally bold) keeps its bullet and spelling and gets the new value;
    with no such bullet one is appended to the section (created if missing)."""
    return _in_file_style(text, lambda lf: _set_key(lf, name, key, value))


def _set_key(text: str, name: str, key: str, value: str) -> str:
    doc = markdown_doc.parse(text)
    lines = list(doc.lines)
    span = find_section(doc, name)
    index = None if span is None else find_key(doc, span, key)
    if index is None:
        return _append(text, name, f"- {key.strip()}: {value}".rstrip(), doc)
    match = _KEY_BULLET.match(lines[index])
    assert match is not None  # find_key matched this line
    lines[index] = f"{match.group(0)} {value}".rstrip()
    return "\n".join(lines)


def key_bullets(doc: Doc, span: Section) -> list[tuple[int, str, str]]:
    """(index, key as spelled, value) of every ``- key: value`` bullet of the section,
    outside fenced code, block quotes and HTML blocks (``Doc.raw``)."""
    inside = [i for i in range(span.body_start, span.end) if _own(doc, i)]
    return _key_bullets(doc.lines, inside)


def _own(doc: Doc, index: int) -> bool:
    # A bullet in code, a quote or an HTML block is an example or a quotation, no fact.
    return index not in doc.code and index not in doc.raw


def _key_bullets(lines: Sequence[str], indexes: Iterable[int]) -> list[tuple[int, str, str]]:
    found: list[tuple[int, str, str]] = []
    for index in indexes:
        match = _KEY_BULLET.match(lines[index])
        if match is not None:
            key = match.group(1).strip().removesuffix("**").strip()
            found.append((index, key, lines[index][match.end() :].strip()))
    return found


def find_key(doc: Doc, span: Section, key: str) -> int | None:
    """The line of the section's first bullet with ``key`` (compared by :func:`fold`)."""
    wanted = fold(key)
    return next((i for i, found, _ in key_bullets(doc, span) if fold(found) == wanted), None)


def body_keys(body: str) -> list[str]:
    """The keys of the ``- key: value`` bullets in a section body an agent sent, read as
    :func:`key_bullets` reads them once the body is in the file: lines split at LF only
    (a U+2028 leaves the key after it inside the line before), fenced code, block quotes
    and HTML blocks skipped."""
    doc = markdown_doc.parse(body)
    outside = [i for i in range(len(doc.lines)) if _own(doc, i)]
    return [key for _, key, _ in _key_bullets(doc.lines, outside)]


def keyed_line(text: str) -> tuple[str, str] | None:
    """(key, value) when ``text`` is one ``Key: value`` line (bulleted, bold or plain),
    as an agent writes a fact it meant to set with ``key``; else None."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    found = _key_line(lines[0])
    if found is None or _DATE.fullmatch(key := found[0].strip()) or not key:
        return None
    value = found[1].strip()
    return None if value.startswith("//") else (key, value)  # "https://…" is no key


def _key_line(line: str) -> tuple[str, str] | None:
    """The key and the value of ``line`` (no line break in it), unstripped, as the pattern
    ``\\s*(?:[-*+]\\s+)?(?:\\*\\*)?([^:*\\n]{1,80}?)(?:\\*\\*)?[ \\t]*:(.*)`` reads it
    (``fullmatch``, its two groups), in time linear in the line: the pattern tried every
    split of a run of blanks, and 6,400 spaces took 2 s.

    Where the key may start, in the pattern's order: after the leading whitespace, a
    bullet and the whitespace after it, with and without "**", and one character back;
    then after the leading whitespace, with and without "**", and one character back. The
    first start that reads a key wins. A start further back in a run of whitespace reads
    one only where the start after it does (the key ends in the same place, and is only
    longer), so each run's last two starts are all that need trying."""
    lead = _after_whitespace(line, 0)
    starts: list[int] = []
    if line[lead : lead + 1] in _BULLETS and line[lead + 1 : lead + 2].isspace():
        after = _after_whitespace(line, lead + 1)
        starts += [after + 2] if line.startswith("**", after) else []
        starts += [after, after - 1] if after - 1 > lead + 1 else [after]
    starts += [lead + 2] if line.startswith("**", lead) else []
    starts += [lead, lead - 1] if lead > 0 else [lead]
    return next(filter(None, (_key_from(line, start) for start in starts)), None)


def _key_from(line: str, start: int) -> tuple[str, str] | None:
    """The key starting at ``start`` and the value, as the pattern reads them from there:
    the shortest text of 1 to ``_MAX_KEY_CHARS`` characters, neither ":" nor "*", followed
    by blanks and ":", or by "**", blanks and ":"."""
    stops = [at for at in (line.find(":", start), line.find("*", start)) if at >= 0]
    stop = min(stops, default=start)
    if stop == start:  # no ":" or "*" ends a key, or the key would be empty
        return None
    if line[stop] == ":":
        # The key ends where the blanks before the ":" start, but holds one character.
        end, value = max(start + 1, len(line[:stop].rstrip(" \t"))), stop + 1
    else:
        colon = _after_blanks(line, stop + 2)
        if not (line.startswith("**", stop) and line.startswith(":", colon)):
            return None
        end, value = stop, colon + 1
    return (line[start:end], line[value:]) if end - start <= _MAX_KEY_CHARS else None


def _after_whitespace(line: str, at: int) -> int:
    return len(line) - len(line[at:].lstrip())


def _after_blanks(line: str, at: int) -> int:
    return len(line) - len(line[at:].lstrip(" \t"))


def dated_bullet(content: str, day: date) -> str:
    """``- 2026-03-01: first line`` with later lines indented under it (blank ones dropped).

    Every break ``str.splitlines`` knows splits: a lone CR or U+2028 left inside the bullet
    is a line break to CommonMark and editors, so the text after it would start a line of
    its own, outside the entry's indentation.
    """
    (_, first), *rest = entry_lines(content)
    return "\n".join([f"- {day.isoformat()}: {first}", *(line for _, line in rest)])


def entry_lines(content: str) -> list[tuple[int, str]]:
    """(line number in ``content``, from 1; the line as :func:`dated_bullet` writes it
    after the bullet's date) of each line of ``content`` that is not blank: stripped, and
    indented two spaces after the first."""
    lines = [(n, line.strip()) for n, line in enumerate(content.splitlines(), 1) if line.strip()]
    return [(n, line if i == 0 else f"  {line}") for i, (n, line) in enumerate(lines)]
