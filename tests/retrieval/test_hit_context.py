"""A conversation hit's ``text`` starts with the previous round's tail, prefixed for
retrieval (``rounds.round_doc``): ``explain.context_chars`` says how many characters of it
are that context, so a reader does not take the previous turn's words for this one's.
Real PostgreSQL, BM25 only (no embedding API)."""

from __future__ import annotations

from memstrata.db.database import Database
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.search import SearchService

EARLIER = ("Where should I store the spare keys?", "Under the blue flowerpot by the door.")
LATER = ("And the bicycle lock combination?", "It is 4711, written on the fridge note.")


def test_context_chars_marks_the_previous_round(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, *EARLIER)
    indexer.index_turn("u", "s", 1, *LATER)
    hits = SearchService(IndexCache(db.sessions), None).search("u", "flowerpot bicycle").hits
    by_path = {h.file_path: h for h in hits}
    first, second = by_path["sessions/s/0"], by_path["sessions/s/1"]
    assert first.explain["context_chars"] == 0  # no round before it
    n = second.explain["context_chars"]
    assert isinstance(n, int) and n > 0
    context, own = second.text[:n], second.text[n:]
    assert own.startswith("User: And the bicycle lock combination?")
    assert "flowerpot" in context and "bicycle" not in context
    assert first.text.endswith(context.rstrip("\n").removeprefix("…"))


def test_every_other_hit_has_no_context(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "t", 0, "the green umbrella is in the hall", "")
    indexer.index_turn("u", "other", 0, "the green umbrella is broken", "")
    hits = SearchService(IndexCache(db.sessions), None).search("u", "green umbrella").hits
    assert len(hits) == 2 and all(h.explain["context_chars"] == 0 for h in hits)
