"""One user's imports do not hold up another user's small writes.

Over real HTTP (uvicorn) on the real database, with the fault-injection fake as the
embedding API, slowed per text, and one passage request in flight at a time (the default
``MEMSTRATA_EMBEDDING_BULK_CONCURRENCY``). User A posts batches of turns from several
threads at once (inline embedding: each batch is several passage requests, and A always
has requests waiting for the one slot). Meanwhile user B writes one turn, then MEMORY.md.
The bulk lane goes round the users with requests waiting (``breaker.Lanes``), so each of
B's writes waits for at most the request of A's in flight: it answers within about two of
A's request durations. Before, any waiter could take a freed slot — the thread of A that
had just freed it first — and B's one turn waited for several of A's batches (a reviewer
measured 8-116 s on a real server).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata
from tests.api.auth import bearer
from tests.reliability.harness import serve
from tests.reliability.importers import Importer
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(180)

BATCH_SIZE = 8  # MEMSTRATA_EMBEDDING_BATCH_SIZE: texts per passage request
DELAY_PER_TEXT_S = 0.05  # the fake's "slow" mode
REQUEST_S = BATCH_SIZE * DELAY_PER_TEXT_S  # one of A's passage requests: 0.4 s
IMPORTERS = 3  # A's threads, each with one batch of turns in flight
TURNS_PER_BATCH = 24  # three passage requests per batch
B_WRITES = 3  # B's rounds of (one turn, one PUT of MEMORY.md)
# B waits for A's request in flight, then sends its own one-text request; the rest is the
# app's own time on two shared cores while A's threads keep it busy.
BOUND_S = 2 * REQUEST_S + 0.4


def timed(call: Any) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = call()
    return response, time.monotonic() - began


def test_one_users_imports_do_not_hold_up_another_users_small_writes(
    settings: Settings, db: Database
) -> None:
    with FaultServer() as fake:
        tuned = fake.as_api_of(settings).model_copy(
            update={
                "embedding_batch_size": BATCH_SIZE,
                "embedding_bulk_concurrency": 1,
                "index_warm_after_import": False,  # no index loads competing for the CPU
            }
        )
        mem = Memstrata.open(tuned, database=db)
        try:
            with serve(create_app(tuned, memstrata=mem)) as url:

                def headers(user: str) -> dict[str, str]:
                    return bearer(mint_token(tuned, user, 3600))

                quiet = httpx.Client(
                    base_url=url, timeout=120, trust_env=False, headers=headers("quiet-b")
                )
                memory = "/api/config/agent-files/memory"
                quiet.get(memory).raise_for_status()  # B provisioned before anything is timed
                _, alone = timed(
                    lambda: quiet.post(
                        "/api/memory/conversations/b/turns",
                        json={"turn_index": 0, "user_message": "B alone"},
                    )
                )
                fake.mode = "slow"
                fake.delay_s = DELAY_PER_TEXT_S
                importer = Importer(
                    url, headers("noisy-a"), threads=IMPORTERS, turns=TURNS_PER_BATCH
                )
                importer.start()
                try:
                    deadline = time.monotonic() + 30
                    while importer.busy() < IMPORTERS and time.monotonic() < deadline:
                        time.sleep(0.05)
                    time.sleep(2 * REQUEST_S)  # A's requests are going out and queueing
                    writes: list[tuple[str, int, float, int]] = []
                    for n in range(1, B_WRITES + 1):
                        busy = importer.busy()
                        turn, took = timed(
                            lambda n=n: quiet.post(
                                "/api/memory/conversations/b/turns",
                                json={"turn_index": n, "user_message": f"B note {n}"},
                            )
                        )
                        writes.append(("turn", turn.status_code, took, busy))
                        busy = importer.busy()
                        put, took = timed(
                            lambda n=n: quiet.put(memory, json={"content": f"# Memory\n- B {n}\n"})
                        )
                        writes.append(("put", put.status_code, took, busy))
                        assert turn.json()["embedded"] == 1, turn.text
                finally:
                    importer.stop()
                quiet.close()
        finally:
            mem.close()
    batches = [seconds for status, seconds in importer.answered if status == 200]
    print(
        f"B alone {alone:.3f} s; B with A importing: "
        + ", ".join(f"{kind} {took:.2f} s (A busy {busy})" for kind, _, took, busy in writes)
        + f"; bound {BOUND_S:.2f} s; A's batches: {len(batches)}, median "
        f"{statistics.median(batches) if batches else 0:.2f} s"
    )
    assert all(status == 200 for _, status, _, _ in writes), writes
    assert all(status == 200 for status, _ in importer.answered), importer.answered
    # A had several batches under way during each of B's writes ...
    assert all(busy >= 2 for *_, busy in writes), writes
    # ... and B waited for about the one request of A's in flight, not for A's queue.
    assert max(took for _, _, took, _ in writes) <= BOUND_S, writes
    assert unembedded(db, "quiet-b") == 0, "B's writes were stored without vectors"


def unembedded(db: Database, user: str) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM memory_embeddings WHERE user_id = :u "
                    "AND embedding IS NULL"
                ),
                {"u": user},
            ).scalar()
            or 0
        )
