"""The crash loop (tests/reliability/crash_loop.py) and what must hold after every kill.

After each restart, with no client writing:

- **files**: each file's GET is whole — exactly the text one put sent, at the version that
  put stored (or the template at version 1) —, no older than the newest acknowledged
  version, and holds the line of every acknowledged put and of no refused one: each put
  adds a line to the version it read, with If-Match, so the stored file is the chain of
  every version. A lost put's line is there or not (counted);
- **turns**: every acknowledged turn is stored with its text; a lost batch is stored whole
  or not at all; nothing is stored that no client sent;
- **sandbox**: each mirror file holds one whole version (a push renames a full temp file
  over it); after the next acknowledged write it holds that write's text, and nothing is
  kept aside as an agent edit (there are no agent edits here: a kept-aside copy would be a
  crash's leftover taken for one);
- **search** answers 200; **healing**: ``/readyz`` reports nothing pending within
  ``HEAL_S``;
- **index**: every row has a vector, the one of its own text; re-indexing each stored file
  afresh changes nothing (no row of a replaced chunk, none missing), and each
  conversation row is what one writer indexing the stored rounds would write.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from memstrata.db.engine import make_session_factory
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.records import StoredChunk, is_conversation_path
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import format_round, round_doc, session_path, stored_round
from memstrata.retrieval.template_history import TemplateScaffold
from tests.reliability.crash_loop import (
    FILES,
    KILL_MODES,
    SESSION,
    Clients,
    Server,
    Write,
    auth,
)
from tests.reliability.harness import p95

HEAL_S = 90.0  # restart until nothing is pending: the backlog of a kill is a few dozen rows


@dataclass
class Summary:
    seed: int
    kills: Counter[str] = field(default_factory=Counter)
    ready_s: list[float] = field(default_factory=list)  # kill → /readyz 200 again
    healed_s: list[float] = field(default_factory=list)  # ready → nothing pending
    pending: list[int] = field(default_factory=list)  # rows pending when ready again
    lost: Counter[str] = field(default_factory=Counter)  # "put applied", "batch not applied"…
    problems: list[str] = field(default_factory=list)
    rows_checked: int = 0  # rows whose vector was compared with their own text's

    def text(self, clients: Clients, seconds: float) -> str:
        acked = clients.writes(outcome="ack")
        turns = sum(len(w.turns) for w in acked)
        lost = ", ".join(f"{k} {v}" for k, v in sorted(self.lost.items())) or "none"

        def stats(values: list[float]) -> str:
            return f"median {statistics.median(values):.2f} s, p95 {p95(values):.2f} s"

        return (
            f"seed {self.seed}: {sum(self.kills.values())} kills ({dict(self.kills)}) in "
            f"{seconds:.0f} s; acknowledged writes checked after every kill: "
            f"{sum(w.op == 'put' for w in acked)} puts, {turns} turns "
            f"({sum(w.op == 'batch' for w in acked)} batches); in flight at a kill: {lost}; "
            f"{clients.searches} searches; {self.rows_checked} row vectors compared; "
            f"ready after a kill: {stats(self.ready_s)}; pending then: max "
            f"{max(self.pending, default=0)}, {sum(p > 0 for p in self.pending)} kills left "
            f"some; healed after ready: {stats(self.healed_s)}; problems: {len(self.problems)}"
        )


class CrashLoop:
    """``with CrashLoop(...) as loop: loop.iteration(n)``: write, kill, restart, check."""

    def __init__(
        self,
        root: Path,
        seed: int,
        embedder: OpenAICompatibleEmbedder,
        *,
        users: tuple[str, ...] = ("u0", "u1"),
        threads_per_user: int = 2,
        max_delay_s: float = 3.0,
        rotate_modes: bool = False,
    ) -> None:
        self.server = Server(root)
        self.clients = Clients(users, threads_per_user, seed)
        self.rng = random.Random(seed)
        self.embedder = embedder
        self.max_delay_s = max_delay_s
        self.rotate_modes = rotate_modes
        self.summary = Summary(seed)
        self.templates: dict[tuple[str, str], str] = {}
        self._compared: set[tuple[int, str]] = set()  # (row id, content hash) already seen

    def __enter__(self) -> CrashLoop:
        self.server.start()
        for user in self.clients.users:
            with self._http(user) as http:
                for kind in FILES:  # provisions the user: version 1, the template
                    got = http.get(f"/api/config/agent-files/{kind.api_name}")
                    assert got.status_code == 200, got.text
                    self.templates[user, kind.api_name] = got.json()["content"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def iteration(self, n: int) -> list[str]:
        """One kill and its checks; the problems found (also kept in the summary)."""
        delay = self.rng.uniform(0.2, self.max_delay_s)
        # In turn when asked, the widest first (a short run then sees every crash shape and
        # the postmaster killed most often), else at random.
        modes = KILL_MODES
        mode = modes[-1 - n % len(modes)] if self.rotate_modes else self.rng.choice(modes)
        killed = [0.0]

        def kill() -> None:
            self.server.kill(mode)
            killed[0] = time.monotonic()

        self.clients.run(self.server.url, delay, n, kill)
        self.summary.kills[mode] += 1
        self.server.start()
        self.summary.ready_s.append(self.server.ready_at - killed[0])
        # Watched from the moment it is ready, while the checks below run.
        with ThreadPoolExecutor(1) as pool:
            healing = pool.submit(self._heal)
            problems = self._files() + self._sandbox_whole() + self._sync_and_search()
            problems += healing.result()
        with self._database() as sessions:
            problems += self._stored(sessions)
        problems += self.clients.unexpected
        self.clients.unexpected.clear()
        where = f"seed {self.summary.seed}, kill {n} ({mode} after {delay:.2f} s): "
        self.summary.problems += [where + p for p in problems]
        return problems

    def _http(self, user: str) -> httpx.Client:
        url = self.server.url
        return httpx.Client(base_url=url, timeout=60, trust_env=False, headers=auth(user))

    def _puts(self, user: str, name: str) -> list[Write]:
        return [w for w in self.clients.writes("put") if (w.user, w.file) == (user, name)]

    def _files(self) -> list[str]:
        problems = []
        for user in self.clients.users:
            with self._http(user) as http:
                for kind in FILES:
                    got = http.get(f"/api/config/agent-files/{kind.api_name}")
                    if got.status_code != 200:
                        problems.append(f"GET {kind.filename}: {got.status_code} {got.text}")
                        continue
                    version, content = int(got.json()["version"]), got.json()["content"]
                    problems += self._file(user, kind.api_name, version, content)
        return problems

    def _file(self, user: str, name: str, version: int, content: str) -> list[str]:
        puts, where = self._puts(user, name), f"{user} {name} v{version}"
        acked = [w for w in puts if w.outcome == "ack"]
        newest = max((w.version for w in acked), default=1)
        problems = [f"{where} is older than acked v{newest}"] if version < newest else []
        if version == 1:
            whole = content == self.templates[user, name]
        else:
            sent = (w for w in puts if w.outcome in ("ack", "lost") and w.base + 1 == version)
            whole = any(w.content == content for w in sent)
        if not whole:
            problems.append(f"{where} is no write's whole text: ...{content[-300:]!r}")
        lines = set(content.splitlines())
        problems += [f"{where}: acked {w.line!r} (v{w.version}) lost" for w in acked
                     if w.line not in lines]  # fmt: skip
        problems += [f"{where}: refused {w.line!r} stored" for w in puts
                     if w.outcome == "refused" and w.line in lines]  # fmt: skip
        for w in puts:
            if w.outcome == "lost" and w.applied is None:
                w.applied = w.line in lines
                self.summary.lost[f"put {'applied' if w.applied else 'not applied'}"] += 1
        return problems

    def _sandbox_file(self, user: str, filename: str) -> str | None:
        path = self.server.data_dir / "sandboxes" / user / filename
        return path.read_text(encoding="utf-8") if path.exists() else None

    def _sandbox_whole(self) -> list[str]:
        problems = []
        for user in self.clients.users:
            for kind in FILES:
                known = {self.templates[user, kind.api_name]} | {
                    w.content for w in self._puts(user, kind.api_name) if w.outcome != "refused"
                }
                if self._sandbox_file(user, kind.filename) not in known:
                    problems.append(f"{user}'s sandbox {kind.filename} is no whole version")
        return problems

    def _sync_and_search(self) -> list[str]:
        problems = []
        for user in self.clients.users:
            with self._http(user) as http:
                for kind in FILES:
                    write = self.clients.put(http, user, kind.api_name, self.rng)
                    if write is None or write.outcome != "ack":
                        problems.append(f"{user}'s write of {kind.filename} after the restart")
                    elif self._sandbox_file(user, kind.filename) != write.content:
                        problems.append(f"{user}'s sandbox {kind.filename} lags the DB")
                kept = http.get("/api/memory/conflicts")
                if kept.status_code != 200 or kept.json()["total"] != 0:
                    problems.append(f"{user}'s kept-aside copies: {kept.text[:500]}")
                found = http.post("/api/memory/search", json={"query": "kayak"})
                if found.status_code != 200:
                    problems.append(f"{user}'s search: {found.status_code} {found.text[:300]}")
        return problems

    def _heal(self) -> list[str]:
        """Poll ``/readyz`` until nothing is pending and the vectors are ``ok``."""
        first = True
        with httpx.Client(base_url=self.server.url, timeout=30, trust_env=False) as http:
            while time.monotonic() - self.server.ready_at < HEAL_S:
                ready = http.get("/readyz")
                body = ready.json() if ready.status_code == 200 else {}
                if first:  # the backlog the kill left
                    self.summary.pending.append(int(body.get("pending", -1)))
                    first = False
                if (body.get("pending"), body.get("vectors")) == (0, "ok"):
                    self.summary.healed_s.append(time.monotonic() - self.server.ready_at)
                    return []
                time.sleep(0.05)
            return [f"not healed within {HEAL_S:g} s: {ready.text}"]

    @contextmanager
    def _database(self) -> Iterator[sessionmaker[Session]]:
        engine = create_engine(self.server.database_url(), poolclass=NullPool)
        try:
            yield make_session_factory(engine)
        finally:
            engine.dispose()

    def _stored(self, sessions: sessionmaker[Session]) -> list[str]:
        """The database's side: turns, the files' and rounds' rows, the vectors."""
        with sessions() as session:
            bare = session.scalar(
                text("SELECT count(*) FROM memory_embeddings WHERE embedding IS NULL")
            )
        problems = [f"{bare} rows without a vector once healed"] if bare else []
        scaffold = TemplateScaffold(sessions, TemplateSet(default_template_dir()))
        scaffold.record(FILES)
        indexer = Indexer(sessions, self.embedder, scaffold=scaffold.keys)
        for user in self.clients.users:
            with sessions() as session:
                query = text("SELECT file_type, content FROM user_memory WHERE user_id = :u")
                contents = {t: c for t, c in session.execute(query, {"u": user})}
                rows = EmbeddingRepository(session, user).load()
            for kind in FILES:
                staged = indexer.stage_memory_file(user, kind, contents[kind.file_type])
                if staged.may_change:
                    problems.append(f"{user}'s {kind.filename} rows are not a fresh index's: "
                                    f"{staged.reports}")  # fmt: skip
            by_path: dict[str, list[StoredChunk]] = {}
            for row in sorted(rows, key=lambda c: (c.file_path or "", c.chunk_index or 0)):
                if is_conversation_path(row.file_path):
                    by_path.setdefault(row.file_path or "", []).append(row)
            problems += self._turns(user, by_path) + self._rounds(user, by_path, indexer)
            problems += self._vectors(user, rows)
        return problems

    def _turns(self, user: str, by_path: dict[str, list[StoredChunk]]) -> list[str]:
        stored = {path: stored_round(chunks) for path, chunks in by_path.items()}
        problems, sent = [], set()
        for w in self.clients.writes():
            if w.user != user or w.op == "put":
                continue
            paths = [session_path(SESSION, i) for i, _ in w.turns]
            sent.update(paths)
            found = [stored.get(p) for p in paths]
            right = [f is not None and f.text == format_round(said, "")
                     for f, (_, said) in zip(found, w.turns, strict=True)]  # fmt: skip
            if w.outcome == "ack" and not all(right):
                problems.append(f"{user}: acked {w.op} {w.turns} not stored as sent")
            elif w.outcome != "ack" and any(f is not None for f in found) and not all(right):
                problems.append(f"{user}: {w.outcome} {w.op} {w.turns} stored in part")
            if w.outcome == "lost" and w.applied is None:
                w.applied = all(right)
                self.summary.lost[f"{w.op} {'applied' if w.applied else 'not applied'}"] += 1
        return problems + [f"{user}: {p} stored, never sent" for p in sorted(set(stored) - sent)]

    def _rounds(
        self, user: str, by_path: dict[str, list[StoredChunk]], indexer: Indexer
    ) -> list[str]:
        """Each round's rows are what one writer indexing the stored rounds would write."""
        rounds = {path: stored_round(chunks) for path, chunks in by_path.items()}
        problems = []
        for path, chunks in by_path.items():
            own = rounds[path]
            assert own is not None
            previous = rounds.get(session_path(own.session_id, own.turn_index - 1))
            want = round_doc(own, previous, indexer.chunk_tokens, indexer.context_tokens)
            contexts = want.contexts or [None] * len(want.texts)
            if [(c.chunk_text, c.context) for c in chunks] != list(
                zip(want.texts, contexts, strict=True)
            ):
                problems.append(f"{user} {path}: rows are not what re-indexing would write")
        return problems

    def _vectors(self, user: str, rows: list[StoredChunk]) -> list[str]:
        todo = [c for c in rows if (c.id, c.content_hash) not in self._compared]
        todo = [c for c in todo if c.vector is not None]
        problems = []
        for start in range(0, len(todo), 32):
            batch = todo[start : start + 32]
            fresh = self.embedder.embed([c.chunk_text for c in batch], "passage")
            for c, v in zip(batch, fresh, strict=True):
                stored, own = np.asarray(c.vector, dtype=np.float64), np.asarray(v)
                if stored @ own / (np.linalg.norm(stored) * np.linalg.norm(own)) < 0.999:
                    problems.append(f"{user} {c.file_path}#{c.chunk_index}: another text's vector")
                self._compared.add((c.id, c.content_hash))
        self.summary.rows_checked += len(todo)
        return problems
