"""The one session-id rule: which conversation ids a round may carry.

Checked for the single-turn route, the batch route, the MCP tools and the library alike
(:func:`check_session_id`); ``SESSION_ID_RULE`` is the text every transport shows for it.
"""

from __future__ import annotations

import re
import unicodedata

from memstrata.errors import InvalidContentError

MAX_SESSION_ID_LENGTH = 200  # file_path is String(255)

# The one session-id rule (the single-turn route, the batch route and the library).
SESSION_ID_RULE = (
    f"1–{MAX_SESSION_ID_LENGTH} characters, not all blank; any printable characters except "
    "'/' and '\\' (no control characters, line separators, bidirectional controls "
    "U+202A–U+202E and U+2066–U+2069, lone surrogates or U+FFFD, which a URL decoder leaves "
    "for bytes that are not UTF-8: percent-encode session ids as UTF-8; letters, digits "
    "and . _ : - are always safe in a URL)"
)
# U+FFFD: "caf%E9" and "caf%E8" both decode to "caf\ufffd" — two sessions merged into one,
# the second overwriting the first's turns. Bidirectional embeddings, overrides and
# isolates (U+202A–U+202E, U+2066–U+2069) reorder what follows them wherever the id is
# shown: "\u202eabc" displays as "cba", and a hit's origin as another session's.
_REFUSED = r"/\\\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffd"
_SESSION_ID = re.compile(rf"\A[^{_REFUSED}]{{1,{MAX_SESSION_ID_LENGTH}}}\Z")
_REFUSED_CHAR = re.compile(f"[{_REFUSED}]")


class InvalidSessionIdError(InvalidContentError):
    """A session id that breaks ``SESSION_ID_RULE`` (HTTP: 400 ``invalid_session_id`` on
    the single-turn route, one per-turn entry of the batch's 422)."""


def check_session_id(session_id: object) -> str:
    """``session_id`` if it follows ``SESSION_ID_RULE``, else ``InvalidSessionIdError``."""
    if (
        not isinstance(session_id, str)
        or not session_id.strip()
        or not _SESSION_ID.match(session_id)
    ):
        shown = (
            repr(session_id[:60])
            if isinstance(session_id, str)
            else f"of type {type(session_id).__name__}"
        )
        which = _what_is_wrong(session_id) if isinstance(session_id, str) else ""
        raise InvalidSessionIdError(f"invalid session_id {shown}{which}: {SESSION_ID_RULE}")
    return session_id


def _what_is_wrong(session_id: str) -> str:
    """The first refused character, else the length when over the limit ("" if neither)."""
    found = _refused_character(session_id)
    if found or len(session_id) <= MAX_SESSION_ID_LENGTH:
        return found
    return f" ({len(session_id)} characters, over the limit of {MAX_SESSION_ID_LENGTH})"


def _refused_character(session_id: str) -> str:
    """Which refused character ``session_id`` holds first, and how to fix it ("" if none)."""
    found = _REFUSED_CHAR.search(session_id)
    if found is None:
        return ""
    char = found.group()
    name = unicodedata.name(char, "") if not "\ud800" <= char <= "\udfff" else "lone surrogate"
    label = f"U+{ord(char):04X}" + (f" {name}" if name else "")
    if "\u202a" <= char <= "\u202e" or "\u2066" <= char <= "\u2069":
        fix = (
            "a bidirectional control, which would show the id (and the text after it) "
            "reordered; remove it"
        )
    elif char in "/\\":
        fix = "a path separator; use another character, such as '-' or ':'"
    elif char == "\ufffd":
        fix = "what a URL decoder makes of bytes that are not UTF-8; percent-encode the id as UTF-8"
    elif "\ud800" <= char <= "\udfff":
        fix = "not valid Unicode; remove it"
    else:
        fix = "a control character or line separator; remove it"
    return f" (character {found.start()} is {label}: {fix})"
