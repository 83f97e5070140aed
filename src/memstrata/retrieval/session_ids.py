"""The one session-id rule: which conversation ids a round may carry.

Checked for the single-turn route, the batch route, the MCP tools and the library alike
(:func:`check_session_id`). A refusal says what is wrong with the id, then
``SESSION_ID_HINT``, the rule in a line, on every surface; ``SESSION_ID_RULE`` is the rule in
full, as the HTTP API's schema documents it, with its advice for an id in a URL path.
"""

from __future__ import annotations

from typing import cast

import regex

from memstrata.errors import InvalidContentError
from memstrata.text import ID_REFUSED, character_at, character_label, edge_whitespace, refused_in_id

MAX_SESSION_ID_LENGTH = 200  # file_path is String(255)

# The rule in full, as the HTTP API documents it (its path segment and the batch's field).
SESSION_ID_RULE = (
    f"1–{MAX_SESSION_ID_LENGTH} characters, not '.' or '..', no whitespace at either end; any "
    "printable characters except '/' and '\\' and the symbols that look like '/' or '\\' "
    "(U+2215 DIVISION SLASH, U+2044 FRACTION SLASH, the full-width forms and the like: letters "
    "of every script are allowed, even those that look like Latin ones); no control "
    "characters, line separators, format characters (the zero-width space U+200B, the "
    "bidirectional controls U+202A–U+202E and U+2066–U+2069 and the like, a zero-width joiner "
    "inside an emoji excepted), lone surrogates or U+FFFD, which a URL decoder leaves for "
    "bytes that are not UTF-8: percent-encode session ids as UTF-8; letters, digits and "
    ". _ : - are always safe in a URL"
)
# Symbols that look like '/' or '\\': those Unicode's confusables.txt maps to either that
# are no letters, and the compatibility forms NFKC reads as holding one (U+FF0F, "℅").
# ``sessions/a∕b/0`` reads as a nested path. Letters are left out on purpose (Katakana
# ノ, the ideographs 丿 and 丶, Coptic Ⳇ): they are words to their writers, as Cyrillic
# "а" is, and a rule refusing a script's letters refuses its users.
_SLASH_LOOKALIKES = (
    "\u1735\u2041\u2044\u2215\u2571\u27cb\u29f8\u2f03\u31d3\U0001d23a"  # like '/'
    "\u2216\u27cd\u29f5\u29f9\u2f02\u31d4\ufe68\U0001d20f\U0001d23b"  # like '\\'
    "\uff0f\uff3c\u2100\u2101\u2105\u2106"  # NFKC: '/', '\\', "a/c", "a/s", "c/o", "c/u"
)
# U+FFFD: "caf%E9" and "caf%E8" both decode to "caf\ufffd" — two sessions merged into one,
# the second overwriting the first's turns. What no id may hold (``text.ID_REFUSED``, the
# user id's rule too): "\u202eabc" displays as "cba", and a hit's origin as another
# session's; "chat\u200b" as "chat".
_REFUSED_CHAR = regex.compile(rf"[/\\\ud800-\udfff\ufffd{_SLASH_LOOKALIKES}]|{ID_REFUSED}")
# The rule in a line, after a refusal's reason: the reason names any rarer character.
SESSION_ID_HINT = (
    f"use 1–{MAX_SESSION_ID_LENGTH} printable characters without '/' or '\\', "
    "e.g. 'chat-2026-12-06'"
)
_SHOWN_CHARS = 60  # of a refused id, in its refusal
# A session's rows are ``sessions/<id>/<turn>``: these two ids would make that path name
# the sessions directory itself or its parent wherever the path is resolved.
_DOT_SEGMENTS = (".", "..")


class InvalidSessionIdError(InvalidContentError):
    """A session id that breaks ``SESSION_ID_RULE`` (HTTP: 400 ``invalid_session_id`` on
    the single-turn route, one per-turn entry of the batch's 422)."""


def check_session_id(session_id: object) -> str:
    """``session_id`` if it follows ``SESSION_ID_RULE``, else ``InvalidSessionIdError``
    saying what is wrong with it, then ``SESSION_ID_HINT``."""
    problem = _problem(session_id)
    if problem is not None:
        raise InvalidSessionIdError(f"{problem}; {SESSION_ID_HINT}", field="session_id")
    return cast(str, session_id)  # no problem: a string


def _problem(session_id: object) -> str | None:
    """What is wrong with ``session_id`` (its type, the first refused character, blank,
    the length), or None when it follows the rule."""
    if not isinstance(session_id, str):
        return f"session_id must be a string, got {type(session_id).__name__}"
    if not session_id:
        return "session_id is empty"
    shown = f"invalid session_id {session_id[:_SHOWN_CHARS]!r}"
    found = _REFUSED_CHAR.search(session_id)
    if found is not None:
        return f"{shown}: {character_at(found.start())} is {_refused(found.group())}"
    if not session_id.strip():
        return f"{shown}: it is blank"
    if (edge := edge_whitespace(session_id)) is not None:
        return (
            f"{shown}: it {edge[0]} with {edge[1]} (whitespace at either end makes an id "
            "that shows like another); remove it"
        )
    if session_id in _DOT_SEGMENTS:
        return (
            f"{shown}: '.' and '..' are path segments (the current and the parent "
            "directory), not names"
        )
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        return (
            f"{shown}: it is {len(session_id)} characters, over the limit of "
            f"{MAX_SESSION_ID_LENGTH}"
        )
    return None


def _refused(char: str) -> str:
    """A refused character, named, and why it is refused."""
    if char in "/\\":
        return f"'{char}' (a path separator)"
    if char in _SLASH_LOOKALIKES:
        return f"{character_label(char)} (it looks like a path separator)"
    if char == "\ufffd":
        why = "it stands where text was not valid UTF-8; send the id's own characters"
    elif "\ud800" <= char <= "\udfff":
        why = "a lone surrogate, not valid Unicode"
    else:
        return refused_in_id(char)
    return f"{character_label(char)} ({why})"
