"""The composition root end to end: one runtime, an agent session, memory search."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import (
    BackgroundEmbeddingUnavailableError,
    InvalidContentError,
    TemplateMissingError,
)
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.embeddings import EmbeddingOutageError
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.rounds import Round, RoundsInvalidError
from memstrata.retrieval.template_history import TemplateScaffold
from memstrata.runtime import HEALER_STOP_S, Memstrata
from tests.retrieval.fault_server import FaultServer


def test_unknown_parts_are_refused(db: Database, settings: Settings) -> None:
    with pytest.raises(TypeError, match="embeder"):
        Memstrata.open(settings, database=db, embeder=None)


def test_a_failed_open_closes_the_database_it_opened(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own database (an embedded server, with a URL a pool) is closed when building
    the rest fails, whatever failed; a database the caller passed stays the caller's."""
    closed: list[Database] = []
    close = Database.close

    def spy(self: Database) -> None:
        closed.append(self)
        close(self)

    monkeypatch.setattr(Database, "close", spy)
    (tmp_path / "no-templates").mkdir()
    broken = settings.model_copy(update={"template_dir": tmp_path / "no-templates"})
    with pytest.raises(TemplateMissingError):
        Memstrata.open(broken, embedder=None)
    assert len(closed) == 1

    def lost(*_: object) -> None:  # the database going away while the runtime is built
        raise OSError("connection lost")

    monkeypatch.setattr(TemplateScaffold, "record", lost)
    with pytest.raises(OSError, match="connection lost"):
        Memstrata.open(settings, embedder=None)
    assert len(closed) == 2
    given = Database.open(settings)
    try:
        with pytest.raises(OSError, match="connection lost"):
            Memstrata.open(settings, database=given, embedder=None)
        assert given not in closed
    finally:
        close(given)


def test_agent_session_remembers_and_searches(open_runtime: Callable[..., Memstrata]) -> None:
    mem = open_runtime()

    async def scenario() -> tuple[str, str, str]:
        session = await mem.open_agent_session("alice", token_limit=8000)
        assert "AGENTS.md" in session.prompt.text and "SOUL.md" in session.prompt.text
        recorded = await session.tools.call(
            "record_memory", {"content": "Alice's cat is called Pixel"}
        )
        found = await session.tools.call("memory_search", {"query": "cat Pixel"})
        await session.end_round()
        return recorded, found, session.prompt.text

    recorded, found, _ = asyncio.run(scenario())
    assert "Pixel" in found, (recorded, found)
    stored = mem.store.get_memory_file("alice", "memory")
    assert stored is not None and "Alice's cat is called Pixel" in stored.content


def test_agent_session_budget_uses_the_hosts_token_counter(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """A host passes its model's tokenizer: the prompt is measured and cut by it."""
    mem = open_runtime()
    counted: list[str] = []

    def per_char(text: str) -> int:  # a tokenizer far dearer than the estimate
        counted.append(text)
        return len(text)

    async def scenario() -> tuple[int, int, int]:
        plain = await mem.open_agent_session("carol", token_limit=8000)
        dear = await mem.open_agent_session("carol", token_limit=8000, count=per_char)
        return plain.prompt.tokens, dear.prompt.tokens, dear.prompt.budget

    plain_tokens, dear_tokens, budget = asyncio.run(scenario())
    assert counted, "the host's counter was never called"
    assert dear_tokens <= budget == 1200
    assert dear_tokens != plain_tokens


def test_import_rounds_refuses_to_defer_what_nothing_would_embed(
    db: Database, settings: Settings, embedding_server: LocalEmbeddingServer
) -> None:
    """The library call behind the batch endpoint: with an embedding API but the worker
    switched off, deferring is refused (a ValueError) and nothing is stored; inline works."""
    spec = embedding_server.model_spec
    off = settings.model_copy(
        update={
            "embedding_base_url": spec.base_url,
            "embedding_model": spec.name,
            "embedding_heal": False,
        }
    )
    mem = Memstrata.open(off, database=db)
    try:
        rounds = [Round("s1", 0, "I planted tomatoes")]
        assert not mem.embeds_in_background
        with pytest.raises(BackgroundEmbeddingUnavailableError, match="embed=inline"):
            mem.import_rounds("alice", rounds, background=True)
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM memory_embeddings")).scalar_one() == 0
        (report,) = mem.import_rounds("alice", rounds)
        assert (report.inserted, report.embedded, report.deferred) == (1, 1, 0)
    finally:
        mem.close()
    assert issubclass(BackgroundEmbeddingUnavailableError, ValueError)  # HTTP 400


def test_decay_can_be_switched_off(db: Database, settings: Settings) -> None:
    """MEMSTRATA_DECAY=false: a months-old turn keeps its score (with the spec's decay
    a recent turn that matches worse comes first), and the decay-off candidate depth
    (MEMSTRATA_MIN_CANDIDATES) applies."""
    now = datetime(2026, 6, 1, tzinfo=UTC)
    rounds = [  # two sessions: neither row carries the other's text as context
        Round("old", 0, "my bicycle is a red bicycle with a bell", timestamp=now - timedelta(120)),
        Round("new", 0, "a bicycle", timestamp=now - timedelta(days=1)),
    ]
    firsts = []
    for decay in (True, False):
        on = settings.model_copy(update={"decay": decay, "min_candidates": 40})
        mem = Memstrata.open(on, database=db, embedder=None)
        try:
            mem.import_rounds("alice", rounds)
            hits = mem.search.search("alice", "red bicycle bell", top_k=2, as_of=now)
            firsts.append(hits.hits[0].source_ids[0])
            assert mem.search.candidate_depth(5) == (30 if decay else 40)
        finally:
            mem.pool.close()
    assert firsts[0].startswith("new") and firsts[1].startswith("old"), firsts


def test_every_retrieval_setting_reaches_the_service_that_uses_it(
    db: Database, settings: Settings
) -> None:
    """Each knob at a value no default has: one the runtime forgot to pass would leave the
    service at its own default, and only this test would notice."""
    tuned = {
        "rrf_k": 7,
        "candidate_multiplier": 4,
        "min_candidates": 41,
        "min_candidates_decay": 23,
        "decay_half_life_days": 12.5,
        "decay_floor": 0.25,
        "chunk_tokens": 64,
        "conversation_context_tokens": 32,
        "max_content_bytes": 1000,
    }
    assert all(Settings.model_fields[name].default != value for name, value in tuned.items())
    mem = Memstrata.open(settings.model_copy(update=tuned), database=db, embedder=None)
    try:
        search, indexer = mem.search, mem.indexer
        assert (search.rrf_k, search.candidate_multiplier) == (7, 4)
        assert (search.min_candidates, search.min_candidates_decay) == (41, 23)
        assert search.decay == DecayPolicy(enabled=True, half_life_days=12.5, floor=0.25)
        assert (indexer.chunk_tokens, indexer.context_tokens) == (64, 32)
        assert mem.store.max_content_bytes == mem.sync.store.max_content_bytes == 1000
    finally:
        mem.pool.close()


def test_a_deferred_import_without_a_running_worker_is_logged_once(
    db: Database,
    settings: Settings,
    embedding_server: LocalEmbeddingServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The library defers an import's embedding to the background worker, which runs only
    after start_background() (or in a serve replica on the same database): say so once,
    rather than leave the rows without vectors silently."""
    spec = embedding_server.model_spec
    on = settings.model_copy(
        update={"embedding_base_url": spec.base_url, "embedding_model": spec.name}
    )
    mem = Memstrata.open(on, database=db)
    try:
        with caplog.at_level("WARNING"):
            for turn in range(2):
                mem.import_rounds(
                    "alice", [Round("s1", turn, "I planted tomatoes")], background=True
                )
        told = [
            event_fields(r)
            for r in caplog.records
            if event_fields(r).get("event") == "embedding.heal.not_running"
        ]
        assert len(told) == 1 and "start_background" in told[0]["hint"]
        caplog.clear()
        mem.start_background()
        with caplog.at_level("WARNING"):
            mem.import_rounds("alice", [Round("s1", 2, "and peppers")], background=True)
        assert not [r for r in caplog.records if "not_running" in r.getMessage()]
    finally:
        mem.close()
    stopping = Memstrata.open(on, database=db)
    try:
        stopping.start_background()
        stopping.stop_background()  # a server stopping: its cut-off imports are no news
        with caplog.at_level("WARNING"):
            stopping.import_rounds("bob", [Round("s1", 0, "and beans")], background=True)
        assert not [r for r in caplog.records if "not_running" in r.getMessage()]
    finally:
        stopping.close()


def test_stopping_does_not_wait_for_a_worker_stuck_in_an_embedding_call(
    db: Database, settings: Settings
) -> None:
    """A server that stops spends its shutdown budget on the requests it cut off, not on
    the re-embedding worker: a worker inside a hung embedding call is left behind (its
    rows are leased; another replica embeds them later)."""
    with FaultServer("hang") as fake:
        hung = settings.model_copy(
            update={
                "embedding_base_url": fake.base_url,
                "embedding_model": "fake-model",
                "embedding_timeout_s": 30.0,
                "embedding_max_retries": 0,
                "embedding_heal_interval_s": 0.1,
            }
        )
        mem = Memstrata.open(hung, database=db)
        try:
            mem.import_rounds("alice", [Round("s1", 0, "I planted tomatoes")], background=True)
            mem.start_background()
            deadline = time.monotonic() + 10
            while not fake.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fake.requests, "the worker never called the embedding API"
            began = time.monotonic()
            mem.stop_background()
            assert time.monotonic() - began < HEALER_STOP_S + 1.0
        finally:
            mem.pool.close()


@pytest.mark.parametrize("version", ["1", True, -1, 2**31, 1.0])
def test_a_library_write_with_a_bad_expected_version_is_refused(
    open_runtime: Callable[..., Memstrata], version: object
) -> None:
    """``"1"`` raised a bare TypeError from a comparison, -1 a version conflict; both
    write paths now say what an expected version is, and the file is untouched."""
    mem = open_runtime()
    mem.store.provision_default_files("vic")
    before = mem.store.get_memory_file("vic", "user")
    assert before is not None
    with pytest.raises(
        InvalidContentError, match=r"expected_version must be an integer from 0 .* or left out; got"
    ):
        mem.store.upsert_memory_file("vic", "user", "x", version)  # type: ignore[arg-type]
    with pytest.raises(
        InvalidContentError, match=r"expected_version must be an integer from 0 .* or left out; got"
    ):
        asyncio.run(
            mem.sync.frontend_edit("vic", "user", "x", version)  # type: ignore[arg-type]
        )
    after = mem.store.get_memory_file("vic", "user")
    assert after is not None and (after.version, after.content) == (
        before.version,
        before.content,
    )


def test_a_library_session_with_a_bad_token_limit_is_refused(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()
    for limit in ("100", -1, True, None):
        with pytest.raises(InvalidContentError, match="token_limit must be a whole number"):
            asyncio.run(mem.open_agent_session("wes", token_limit=limit))  # type: ignore[arg-type]


def test_a_library_import_of_something_else_than_rounds_is_refused_whole(
    db: Database, open_runtime: Callable[..., Memstrata]
) -> None:
    """A dict instead of a Round raised AttributeError; now it is a per-round error of
    the batch, and nothing is stored."""
    mem = open_runtime()
    good = Round("s", 0, "hello", "", None)
    with pytest.raises(RoundsInvalidError) as caught:
        mem.import_rounds("xan", [good, {"session_id": "s"}])  # type: ignore[list-item]
    [error] = caught.value.errors
    assert error["index"] == 1 and error["session_id"] is None
    assert "must be a memstrata.retrieval.rounds.Round, got dict" in error["error"]
    with db.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT count(*) FROM memory_embeddings WHERE user_id = 'xan'")
        ).scalar_one()
    assert stored == 0


def test_drain_lets_a_cancelled_edit_finish_and_sends_no_more_passages(
    db: Database, settings: Settings
) -> None:
    """What a host app's shutdown calls after its grace (``memstrata serve`` does the
    same): the memory-file edit whose request was cut off while embedding still lands,
    and from then on no passage embedding is sent."""
    with FaultServer("slow") as fake:
        fake.delay_s = 0.3  # per text
        slow = fake.as_api_of(settings)
        mem = Memstrata.open(slow, database=db)
        try:

            async def cut_off_then_drain() -> int:
                edit = asyncio.create_task(
                    mem.sync.frontend_edit("dana", FileKind.MEMORY, "Keeps bees in Lyon\n")
                )
                await fake.called()
                edit.cancel()  # what a server's shutdown does to the request
                return await mem.drain(10)

            assert asyncio.run(cut_off_then_drain()) == 0
            stored, _ = asyncio.run(mem.sync.read_file("dana", FileKind.MEMORY))
            assert "Keeps bees in Lyon" in stored.content
            sent = len(fake.requests)
            assert mem.embedder is not None
            with pytest.raises(EmbeddingOutageError, match="the server is stopping"):
                mem.embedder.embed(["another passage"], "passage")
            assert len(fake.requests) == sent
        finally:
            mem.pool.close()


def test_drain_says_which_edits_it_left_running(
    db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with FaultServer("slow") as fake:
        fake.delay_s = 2.0  # per text: far longer than the drain waits
        mem = Memstrata.open(fake.as_api_of(settings), database=db)
        try:

            async def cut_off_then_drain_briefly() -> int:
                edit = asyncio.create_task(
                    mem.sync.frontend_edit("gil", FileKind.MEMORY, "Collects stamps\n")
                )
                await fake.called()
                edit.cancel()
                return await mem.drain(0.1)

            with caplog.at_level(logging.WARNING, logger="memstrata.runtime"):
                assert asyncio.run(cut_off_then_drain_briefly()) == 1
            [abandoned] = [
                f
                for f in map(event_fields, caplog.records)
                if f.get("event") == "shutdown.writes_abandoned"
            ]
            assert (abandoned["running"], abandoned["waited_s"]) == (1, 0.1)
        finally:
            mem.pool.close()


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_the_fusion_setting_reaches_the_search(
    db: Database, settings: Settings, fusion: str
) -> None:
    mem = Memstrata.open(settings.model_copy(update={"search_fusion": fusion}), database=db)
    try:
        assert mem.search.fusion == fusion
    finally:
        mem.close()
