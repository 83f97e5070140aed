"""The answers the docs show, read as patterns, and real answers matched against them.

A transcript in the docs (README.md's HTTP API section, docs/MCP.md) is a ``sh`` block:
each command is followed, with no blank line between, by ``# …`` lines that are its answer;
a ``#`` line after a blank line says what comes next and is not an answer. An answer shows
an optional head (``HTTP/1.1 200 OK … etag: "1"``) and then the body, one line per body
line (a JSON document, or SSE's ``event: message`` / ``data: {…}``).

The docs elide with ``…``; the rules are strict so that a doc can only be vague where it
says so:

- a bare ``…`` as a JSON value matches any value; as an object's last member, any further
  members (without it the answer's keys must be exactly those shown); as an array's last
  element, any further elements (without it the lengths must be equal);
- a string with ``…`` in it matches a string that begins with the text before the first
  ``…``, ends with the text after the last and holds the parts between in that order, so
  ``"…"`` is any string; ``"…the same text…"`` is exactly the answer's top-level
  ``detail``;
- every other value must be equal, and of the same JSON type (``1`` is not ``true``);
- a head is the status line, then the headers worth seeing, on the same line after ``…``
  (a transcript) or on lines of their own (an ``http`` block): the status line must be the
  answer's, each header must be among the answer's (name in any case, value exact); the
  answer may carry more (its date and request id change with every request, so no doc can
  show them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

ELLIPSIS = "…"
SAME = "…the same text…"  # the docs' way to say: the detail again, word for word


class _Any:
    def __repr__(self) -> str:
        return ELLIPSIS


ANY = _Any()


@dataclass(frozen=True)
class Open:
    """An object shown with ``…`` as its last member, or an array with ``…`` last."""

    shown: dict[str, Any] | list[Any]


# --- reading a documented JSON value ---------------------------------------------------

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")


def parse_pattern(text: str) -> Any:
    """A documented JSON value with elisions; ``ValueError`` when it is not one."""
    value, end = _value(text, _skip(text, 0))
    if _skip(text, end) != len(text):
        raise ValueError(f"more after the JSON value at {end}: {text[end : end + 30]!r}")
    return value


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # \s* matches everywhere
    return match.end()


def _value(text: str, at: int) -> tuple[Any, int]:
    if text.startswith(ELLIPSIS, at):
        return ANY, at + 1
    if text.startswith("{", at):
        return _object(text, _skip(text, at + 1))
    if text.startswith("[", at):
        return _array(text, _skip(text, at + 1))
    value, end = _DECODER.raw_decode(text, at)
    return value, end


def _object(text: str, at: int) -> tuple[Any, int]:
    members: dict[str, Any] = {}
    if text.startswith("}", at):
        return members, at + 1
    while True:
        if text.startswith(ELLIPSIS, at):
            return Open(members), _close(text, _skip(text, at + 1), "}")
        key, at = _DECODER.raw_decode(text, at)
        if not isinstance(key, str) or key in members:
            raise ValueError(f"a key must be a new string, not {key!r}")
        at = _close(text, _skip(text, at), ":")
        members[key], at = _value(text, _skip(text, at))
        at = _skip(text, at)
        if text.startswith("}", at):
            return members, at + 1
        at = _skip(text, _close(text, at, ","))


def _array(text: str, at: int) -> tuple[Any, int]:
    items: list[Any] = []
    if text.startswith("]", at):
        return items, at + 1
    while True:
        if text.startswith(ELLIPSIS, at):  # only last: "any one item" would read as "more"
            return Open(items), _close(text, _skip(text, at + 1), "]")
        item, at = _value(text, at)
        items.append(item)
        at = _skip(text, at)
        if text.startswith("]", at):
            return items, at + 1
        at = _skip(text, _close(text, at, ","))


def _close(text: str, at: int, char: str) -> int:
    if not text.startswith(char, at):
        raise ValueError(f"expected {char!r} at {at}: {text[at : at + 30]!r}")
    return at + 1


# --- matching --------------------------------------------------------------------------


def text_matches(shown: str, actual: str) -> bool:
    """``shown`` with each ``…`` standing for any text (none included)."""
    parts = shown.split(ELLIPSIS)
    head, tail = parts[0], parts[-1]
    if len(parts) == 1:
        return shown == actual
    if len(actual) < len(head) + len(tail) or not (
        actual.startswith(head) and actual.endswith(tail)
    ):
        return False
    at, end = len(head), len(actual) - len(tail)
    for part in parts[1:-1]:
        found = actual.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def mismatches(shown: Any, actual: Any, path: str = "$", detail: Any = None) -> list[str]:
    """Where ``actual`` (parsed JSON) differs from the pattern ``shown``; [] when it
    matches. ``detail`` is what ``"…the same text…"`` must equal (default: ``actual``'s
    own top-level ``detail``)."""
    if path == "$" and detail is None and isinstance(actual, dict):
        detail = actual.get("detail")
    if shown is ANY:
        return []
    if isinstance(shown, Open):
        return _open(shown.shown, actual, path, detail)
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path}: an object was shown, the answer has {actual!r}"]
        if set(shown) != set(actual):
            return [f"{path}: keys {sorted(shown)} shown, {sorted(actual)} answered"]
        return _members(shown, actual, path, detail)
    if isinstance(shown, list):
        if not isinstance(actual, list) or len(shown) != len(actual):
            return [f"{path}: {len(shown)} items shown, the answer has {actual!r}"]
        return _items(shown, actual, path, detail)
    if isinstance(shown, str) and isinstance(actual, str):
        ok = actual == detail if shown == SAME else text_matches(shown, actual)
        return [] if ok else [f"{path}: {shown!r} shown, {actual!r} answered"]
    if type(shown) is not type(actual) or shown != actual:
        return [f"{path}: {shown!r} shown, {actual!r} answered"]
    return []


def _open(shown: dict[str, Any] | list[Any], actual: Any, path: str, detail: Any) -> list[str]:
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path}: an object was shown, the answer has {actual!r}"]
        missing = sorted(set(shown) - set(actual))
        if missing:
            return [f"{path}: keys {missing} shown, not answered"]
        return _members(shown, actual, path, detail)
    if not isinstance(actual, list) or len(actual) < len(shown):
        return [f"{path}: at least {len(shown)} items shown, the answer has {actual!r}"]
    return _items(shown, actual[: len(shown)], path, detail)


def _members(shown: dict[str, Any], actual: dict[str, Any], path: str, detail: Any) -> list[str]:
    return [
        m for key in shown for m in mismatches(shown[key], actual[key], f"{path}.{key}", detail)
    ]


def _items(shown: list[Any], actual: list[Any], path: str, detail: Any) -> list[str]:
    return [
        m
        for i, (s, a) in enumerate(zip(shown, actual, strict=True))
        for m in mismatches(s, a, f"{path}[{i}]", detail)
    ]


def line_mismatches(shown: str, actual: str) -> list[str]:
    """One documented body line against one answered line: the text up to the first
    ``{`` or ``[`` (``data: `` in SSE, often nothing) exactly, the rest as JSON; a line
    without either as text with ``…``."""
    brace = re.search(r"[{\[]", shown)
    if brace is None:
        return [] if text_matches(shown, actual) else [f"{shown!r} shown, {actual!r} answered"]
    prefix = shown[: brace.start()]
    if not actual.startswith(prefix):
        return [f"{shown!r} shown, {actual!r} answered"]
    try:
        answered = json.loads(actual[len(prefix) :])
    except ValueError:
        return [f"JSON shown, {actual!r} answered"]
    return mismatches(parse_pattern(shown[len(prefix) :]), answered)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as ``curl -si`` prints it (``status`` "" when printed without -i)."""

    status: str
    headers: list[tuple[str, str]]
    body: str

    @classmethod
    def read(cls, printed: str, with_head: bool) -> Answer:
        if not with_head:
            return cls("", [], printed)
        head, _, body = printed.partition("\r\n\r\n")
        while head.startswith("HTTP/1.1 100"):  # curl's Expect: 100-continue
            head, _, body = body.partition("\r\n\r\n")
        status, *lines = head.split("\r\n")
        headers = [(n.strip().lower(), v.strip()) for n, _, v in (x.partition(":") for x in lines)]
        return cls(status, headers, body)

    def body_lines(self) -> list[str]:
        """The body's lines, without the blank ones that end an SSE event."""
        return [line for line in self.body.splitlines() if line.strip()]


def head_mismatches(shown: list[str], answer: Answer) -> list[str]:
    """``shown``: the status line (its headers perhaps after ``…``), then header lines (an
    ``http`` block's layout)."""
    status, *inline = [part.strip() for part in shown[0].split(ELLIPSIS)]
    wrong = [] if status == answer.status else [f"{status!r} shown, {answer.status!r} answered"]
    for header in [*inline, *shown[1:]]:
        name, _, value = header.partition(":")
        if (name.strip().lower(), value.strip()) not in answer.headers:
            wrong.append(f"header {header!r} shown, the answer has {answer.headers}")
    return wrong


def answer_mismatches(shown: list[str], answer: Answer) -> list[str]:
    """A documented answer (its ``# `` lines) against the answer: the head, when shown, is
    the first line (headers after ``…``: a line of its own would read as a body line such
    as SSE's ``event: message``), then the body lines."""
    head = shown[:1] if shown and shown[0].startswith("HTTP/") else []
    body = shown[len(head) :]
    wrong = head_mismatches(head, answer) if head else []
    lines = answer.body_lines()
    if len(lines) != len(body):
        return [*wrong, f"{len(body)} body lines shown, {len(lines)} answered: {answer.body!r}"]
    return wrong + [m for s, a in zip(body, lines, strict=True) for m in line_mismatches(s, a)]


# --- transcripts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One command of a transcript, its continuation lines included, and its answer."""

    command: str
    answer: list[str]


def transcript(block: str) -> list[Step]:
    """The steps of a ``sh`` block (see the module doc for the layout)."""
    steps: list[Step] = []
    command: list[str] = []
    answering = False
    for line in block.splitlines():
        if command and command[-1].endswith("\\"):
            command.append(line)
        elif not line.strip():
            answering = False
        elif line.startswith("#"):
            if answering:
                steps[-1].answer.append(line.removeprefix("#").strip())
        else:
            command = [line]
        if command and not command[-1].endswith("\\"):
            steps.append(Step("\n".join(command), []))
            command, answering = [], True
    assert not command, f"a command continues past the block's end: {command}"
    return steps
