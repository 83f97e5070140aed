"""The markup a model types that the tools write themselves, taken off before they write.

A model sees MEMORY.md and USER.md in its prompt and copies their syntax into its calls:
an entry's ``- `` and date, a key's ``**``, a value's ``- ``. Stored as written, each came
out twice (``- 2026-03-01: - Prefers dark mode``, a doubled date, a second ``- **Name**:
Ivan`` bullet beside ``- Name: Robert``). One rule decides it, the one entries compare by
(:func:`memstrata.agent.entries.entry_syntax`): a leading list marker and a leading
``YYYY-MM-DD:`` date are the entry's syntax, not its text. A key's emphasis markers are
the bullet's syntax too (``- **Name**: …`` is key ``Name`` to :mod:`sections`).

A typed date is the entry's date only when it could be the day of what the entry says,
recorded now: up to :data:`MAX_PAST_DAYS` before today (yesterday's meeting, last week's
decision), or tomorrow (east of UTC a user's today is already UTC's tomorrow). A model
whose knowledge ends in 2024 writes a 2024 "today", and one in the future is a day to
come (an appointment): either is kept in the entry's text, nothing lost, and the entry is
dated today (:func:`entry_date`), which the answer says.

A list of two items or more with nothing else in it is several entries, one per top-level
item: a model that lists facts means each one, and stored as one entry they would be
removed by one ``replaces`` and dropped together by the prompt's cut. A list after a first
line of text (``Plan:`` then steps) stays that entry's detail.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from memstrata.agent import markdown_doc
from memstrata.agent.entries import entry_syntax
from memstrata.agent.markdown_doc import Kind

# How far back a typed date is still the entry's: a month's catch-up after a holiday (an
# event of 4 weeks and 3 days ago); a model's invented "today" is off by months or years.
MAX_PAST_DAYS = 31
_AHEAD_DAYS = 1  # UTC+14's today is UTC's tomorrow; no time zone is further ahead
# The emphasis a model wraps a key in: "**Name**", "*Name*", "__Name__", "_Name_".
# The same run on both sides, the text inside neither starting nor ending with a blank or
# another marker ("** Name **" is no emphasis to CommonMark, and is kept).
_EMPHASIS = re.compile(r"(\*{1,3}|_{1,3})([^*_\s](?:.*[^*_\s])?)\1")
# A bullet before a value ("- Ivan"); a number ("1. FC Köln") is too often the value.
_BULLET = re.compile(r"[-*+][ \t]+")


def new_entries(content: str) -> list[tuple[date | None, str]]:
    """The entries ``content`` holds (:func:`list_items`), each as (the date it starts
    with, if a valid one, and its text without that date and its list marker); those
    with no text left are left out."""
    found = [entry_text(item) for item in list_items(content)]
    return [(day, text) for day, text in found if text.strip()]


def entry_text(content: str) -> tuple[date | None, str]:
    """(date, text) of one entry's content: its first line read by ``entry_syntax`` (a
    date that is no calendar day, such as ``2026-13-01``, stays text), its later lines
    as they are (blank ones too: a refusal numbers lines as the model sent them)."""
    lines = content.splitlines() or [""]
    at = next((i for i, line in enumerate(lines) if line.strip()), 0)
    first = lines[at].strip()
    day, text = entry_syntax(first)
    parsed = _calendar_day(day)
    if parsed is None:
        text = item if (item := markdown_doc.item_text(first)) is not None else first
    return parsed, "\n".join([*lines[:at], text.strip(), *lines[at + 1 :]])


def entry_date(typed: date | None, text: str, today: date) -> tuple[date, str, str | None]:
    """(the date an entry is written with, its text, the typed date set aside as an answer
    names it: ``2024-05-01 (more than 31 days ago)``): the typed date if near today, else
    today, and the typed date kept before the text's first line (module doc); None for
    the third when no date was set aside."""
    if typed is None:
        return today, text, None
    if typed > today + timedelta(days=_AHEAD_DAYS):
        why = "in the future"
    elif typed < today - timedelta(days=MAX_PAST_DAYS):
        why = f"more than {MAX_PAST_DAYS} days ago"
    else:
        return typed, text, None
    lines = text.split("\n")
    at = next((i for i, line in enumerate(lines) if line.strip()), 0)
    lines[at] = f"{typed.isoformat()}: {lines[at]}"
    return today, "\n".join(lines), f"{typed.isoformat()} ({why})"


def _calendar_day(text: str | None) -> date | None:
    try:
        return None if text is None else date.fromisoformat(text)
    except ValueError:
        return None


def list_items(content: str) -> list[str]:
    """``content`` split into its top-level list items when it is two or more of them and
    nothing else (module doc), else ``[content]``. Lines are split as entries write them:
    at every break ``str.splitlines`` knows."""
    text = "\n".join(content.splitlines())
    doc = markdown_doc.parse(text)
    blocks = doc.blocks
    if len(blocks) < 2 or any(block.kind is not Kind.ITEM for block in blocks):
        return [content]
    return ["\n".join(doc.lines[block.start : block.end]) for block in blocks]


def plain_key(key: str) -> str:
    """``update_user``'s key without a bullet before it and the emphasis around it."""
    text = _unbulleted(key.strip()).strip()
    while (match := _EMPHASIS.fullmatch(text)) is not None:
        text = match.group(2).strip()
    return text


def plain_value(value: str) -> str:
    """``update_user``'s value without a bullet before it (``- Ivan``)."""
    stripped = value.strip()
    bare = _unbulleted(stripped)
    return bare if bare.strip() else stripped


def _unbulleted(text: str) -> str:
    match = _BULLET.match(text)
    return text if match is None else text[match.end() :]
