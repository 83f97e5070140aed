"""Stored text made safe to show on the operator's terminal.

Memory files, kept-aside copies, conversation rows and user ids are written by agents and
API callers. Printed as they are, an escape sequence in them (``\\x1b[2J`` clearing the
screen, an OSC 52 write to the clipboard, an OSC 8 hyperlink whose text is not its
target), another C0 or C1 control (a lone carriage return rewrites the line) or a bidi
control (U+202E shows text reversed) is acted on by the terminal that shows them. The
CLI's human-readable output passes such text through :func:`visible`; its JSON output
through :func:`json_text`. So do the log lines (``memstrata.logs``): their fields (a URL
path, a token's ``kid``, a user id) are chosen by clients, some before authentication,
and a log is read on a terminal too; in a text log a line break would forge a line.

Each such character is written as its Python escape, ``\\x1b``, ``\\x9b``, ``\\u202e``:
ASCII, so it survives any terminal encoding, and the form a Python ``repr`` and a log
reader show. Backslashes are left alone, so a text that holds the four characters
``\\x1b`` looks the same as one that held ESC: both are harmless, and ``--json`` (or
``conflicts show`` into a file or a pipe) gives the exact text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# What a terminal acts on rather than shows: C0 controls, DEL and C1 controls; and the
# bidi controls (Unicode's Bidi_Control property: ALM, LRM, RLM, LRE…RLO, LRI…PDI), which
# reorder what is shown on terminals that do bidi, as "Trojan Source" does in editors.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# In a line or a field of a row every one of them is escaped, newline and tab included
# (they would break the row), and so are the Unicode line and paragraph separators ...
_IN_FIELD = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
# ... while text shown as lines keeps its newlines, tabs and CR LF line ends (harmless:
# only a carriage return on its own goes back over what the line showed).
_IN_LINES = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}]|\r(?!\n)")
# A JSON text already escapes C0 (json.dumps always does); these are what is left, the
# line and paragraph separators among them (a log viewer may break a line at either). Each
# lies inside a JSON string, where ``\\uXXXX`` is the same character to a parser.
_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}\u2028\u2029]")


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character a terminal would act on written as its escape;
    ``lines``: text shown as lines, whose newlines, tabs and CR LF stay as they are."""
    return (_IN_LINES if lines else _IN_FIELD).sub(_escape, text)


def json_text(value: object, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as one line of JSON (non-ASCII text as it is, as before), with the
    characters a terminal would act on as ``\\u`` escapes: the same data to any parser,
    and safe to read on a terminal (JSON itself leaves DEL, C1 and bidi controls raw).
    ``default``: as ``json.dumps`` takes it."""
    text = json.dumps(value, ensure_ascii=False, default=default)
    return _IN_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def _escape(match: re.Match[str]) -> str:
    # Python's own escape (``\\n``, ``\\x1b``, ``\\u202e``): what ``ascii`` writes.
    return ascii(match[0])[1:-1]
