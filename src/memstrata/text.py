"""A check on text that every entry point shares (tool arguments, turns, user ids)."""

from __future__ import annotations


def lone_surrogate_at(text: str) -> int | None:
    """Where ``text`` has a lone surrogate (which JSON's ``"\\ud800"`` can carry and UTF-8,
    hence PostgreSQL, cannot store), or None when it has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None
