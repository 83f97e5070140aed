"""Loading an index pauses cyclic garbage collection, and gives it back as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from memstrata.db.database import Database
from memstrata.retrieval import cache as cache_module
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.repository import EmbeddingRepository


@pytest.fixture
def gc_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_nested_and_overlapping_pauses_resume_only_at_the_end(gc_on: None) -> None:
    first = cache_module.cyclic_gc_paused()
    second = cache_module.cyclic_gc_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)  # the first load ends while the second still runs
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_collection_switched_off_by_the_caller_stays_off(gc_on: None) -> None:
    gc.disable()
    with cache_module.cyclic_gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_load_runs_paused_and_collection_resumes_after(
    db: Database, gc_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    Indexer(db.sessions, None).index_turn("gc-user", "s1", 0, "hello there", "hi", None)
    seen: list[bool] = []
    real_load = EmbeddingRepository.load

    def load(self: EmbeddingRepository, *args: object, **kw: object) -> object:
        seen.append(gc.isenabled())
        return real_load(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(EmbeddingRepository, "load", load)
    index = IndexCache(db.sessions).get("gc-user", None)
    assert len(index.rows) == 1
    assert seen == [False] and gc.isenabled()

    # A failing load gives collection back too.
    def broken(self: EmbeddingRepository, *args: object, **kw: object) -> object:
        raise RuntimeError("database went away")

    monkeypatch.setattr(EmbeddingRepository, "load", broken)
    Indexer(db.sessions, None).index_turn("gc-user", "s1", 1, "again", "ok", None)
    with pytest.raises(RuntimeError):
        IndexCache(db.sessions).get("gc-user", None)
    assert gc.isenabled()
