"""YAML frontmatter, one definition for templates and skills: a leading ``---`` line, the
YAML, and a closing ``---`` (or YAML's ``...``) line, optionally after a UTF-8 BOM."""

from __future__ import annotations

import re

_FRONTMATTER = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(?P<meta>(?:.*?\r?\n)??)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S
)


def split_frontmatter(text: str) -> tuple[str | None, str]:
    """``(yaml, body)``; ``yaml`` is None when the text has no frontmatter block."""
    match = _FRONTMATTER.match(text)
    if match is None:
        return None, text
    return match.group("meta"), text[match.end() :]
