"""One row of a user's in-memory search index, and what kind of memory it came from."""

from __future__ import annotations

from typing import NamedTuple

from memstrata.retrieval.fusion import is_resident
from memstrata.retrieval.records import is_conversation_path


def source_of(file_path: str | None) -> str:
    if is_resident(file_path):
        return "memory"
    if is_conversation_path(file_path):
        return "conversation"
    return "notes"


class Row(NamedTuple):
    """A named tuple, not a frozen dataclass: a load makes one per row, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, ~1 µs a row
    more (docs/BENCHMARKS.md, "Vector column storage")."""

    id: int
    file_path: str | None
    chunk_index: int | None
    text: str
    created_at: float  # POSIX seconds
    source: str
    source_ids: tuple[str, ...]
    model: str | None
    # How many leading characters of ``text`` are the previous round's tail, prefixed for
    # retrieval (``rounds.round_doc``); 0 for every other row.
    context_chars: int = 0
