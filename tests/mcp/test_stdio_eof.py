"""stdin closed while a write is in flight: ``memstrata mcp`` answers what it received,
then exits; it never answers an error for a write that was committed.

The SDK cancelled every handler at EOF and answered each "Connection closed" (-32000),
while the write went on and committed: the client was told a saved entry was not. The
write here embeds through a slow fake embedding API, so it is surely in flight at EOF.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.db.database import Database
from tests.mcp.stdio_driver import call, read_answers, started, stop, stored_memory
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def _settings(pg_url: str, fake: FaultServer, **more: str) -> dict[str, str]:
    return {
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_BASE_URL": fake.base_url,
        "MEMSTRATA_EMBEDDING_MODEL": "fake-model",
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_LOG_LEVEL": "INFO",
        **more,
    }


def _write_then_close(
    tmp_path: Path, pg_url: str, fake: FaultServer, user: str, entry: str, **more: str
) -> tuple[list[dict[str, object]], int, float, Path, int]:
    """record_memory ``entry``, close stdin at once; every answer after that, the exit
    status, how long the exit took from the close, and the embedding calls made before
    the write: the caller checks, after the answers, that the write made one."""
    process, log = started(tmp_path, user, **_settings(pg_url, fake, **more))
    asked = len(fake.requests)
    fake.delay_s, fake.mode = 1.5, "slow"  # the write's one chunk embeds for 1.5 s
    assert process.stdin is not None
    process.stdin.write(call(2, "record_memory", {"content": entry}))
    process.stdin.close()
    closed = time.monotonic()
    try:
        answers = read_answers(process, until_id=None, timeout_s=60)
        status = process.wait(timeout=60)
    finally:
        stop(process)
    return answers, status, time.monotonic() - closed, log, asked


def test_eof_with_a_write_in_flight_answers_it_then_exits(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    entry = "Rows a scull on the Saone at dawn"
    answers, status, _, log, asked = _write_then_close(tmp_path, pg_url, fake, "eof-ann", entry)
    assert [a.get("id") for a in answers] == [2], answers or log.read_text(errors="replace")
    assert "error" not in answers[0] and not answers[0]["result"]["isError"], answers
    assert "Recorded" in answers[0]["result"]["content"][0]["text"]
    assert entry in stored_memory(db, "eof-ann")
    assert status == 0
    assert len(fake.requests) > asked, "the write was not in flight at EOF"


def test_eof_past_the_grace_gives_no_answer_rather_than_a_wrong_one(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    """The write outlives the 1 s grace (it embeds for 1.5 s): the handler is cut off
    without an answer; the write itself still lands before the exit (the runtime's
    drain, as serve)."""
    entry = "Keeps a sourdough starter named Gus"
    answers, status, took, log, asked = _write_then_close(
        tmp_path, pg_url, fake, "eof-bob", entry, MEMSTRATA_SHUTDOWN_GRACE_S="1"
    )
    assert answers == [], answers
    assert status == 0
    assert took < 1 + 13 + 10, took  # the grace + the drain bound + start-up slack
    assert entry in stored_memory(db, "eof-bob")
    assert '"event": "mcp.stdio_cut_off"' in log.read_text(errors="replace")
    assert len(fake.requests) > asked, "the write was not in flight at EOF"


def test_sigterm_after_eof_never_answers_an_error_for_the_write(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    """Told to stop hard: the answer is the success or nothing, and the data matches."""
    entry = "Collects enamel badges from ferries"
    process, log = started(tmp_path, "eof-cat", **_settings(pg_url, fake))
    asked = len(fake.requests)
    fake.delay_s, fake.mode = 1.5, "slow"
    assert process.stdin is not None
    process.stdin.write(call(2, "record_memory", {"content": entry}))
    process.stdin.close()
    try:
        deadline = time.monotonic() + 20
        while len(fake.requests) == asked and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        answers = read_answers(process, until_id=None, timeout_s=60)
        process.wait(timeout=60)
    finally:
        stop(process)
    assert all("error" not in a for a in answers), answers or log.read_text(errors="replace")
    if answers:
        assert [a.get("id") for a in answers] == [2], answers
        assert entry in stored_memory(db, "eof-cat")
    assert len(fake.requests) > asked, "the write never called the embedding API"
