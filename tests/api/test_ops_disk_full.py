"""A full disk shows in ``/readyz`` and clears by itself (``memstrata.db.disk``).

Before, writes answered 503 "try again shortly" while ``/readyz`` said ready and ``ok``.
The disks are real: a small tmpfs (``tests/small_fs.py``) holding the data directory, or
an embedded PostgreSQL standing in for an external server, filled until the kernel says
ENOSPC. The pure rules are checked on their own too, where mounting is not allowed.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg.errors
import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.disk import DISK_FULL_BELOW_BYTES, DiskWatch, full_path, is_full
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.small_fs import SmallFs, fill, small_fs  # noqa: F401  (a fixture)

FILES = "/api/config/agent-files/{}"


def readyz(client: TestClient) -> dict[str, object]:
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.text  # full or not, reads still answer
    body = answer.json()
    assert body["status"] == "ready"
    return dict(body)


def test_a_full_data_directory_says_full_and_clears(
    small_fs: SmallFs,  # noqa: F811
    settings: Settings,
    db: Database,
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = small_fs("24m")
    on_disk = settings.model_copy(
        update={"data_dir": disk / "data", "sandbox_root": disk / "sandboxes"}
    )
    mem = Memstrata.open(on_disk, database=db)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            assert "disk" not in readyz(client)  # said only when full: the body is as before
            ballast = fill(disk)
            with caplog.at_level(logging.INFO, logger="memstrata"):
                full = readyz(client)
                assert readyz(client) == full  # logged once, not on every probe
            assert (full["disk"], full["disk_path"]) == ("full", str(disk / "data"))
            assert full["database"] == "ok"  # the database's own disk has room
            told = [event_fields(r) for r in caplog.records if r.getMessage() == "health.disk_full"]
            for event in told:  # logged while a probe was served: that request's id
                assert isinstance(event.pop("request_id"), str)
            assert told == [
                {"event": "health.disk_full", "path": str(disk / "data"), "database": False}
            ]
            ballast.unlink()
            back = readyz(client)
            assert "disk" not in back and "disk_path" not in back
    finally:
        mem.close()


@pytest.fixture
def full_database(small_fs: SmallFs) -> Iterator[tuple[str, Path]]:  # noqa: F811
    """An embedded PostgreSQL whose files are on a small tmpfs, used as an external server
    (its disk is not one of the runtime's directories): (URL, the tmpfs)."""
    disk = small_fs("96m")
    server = EmbeddedPostgres(disk / "data")
    url = server.start()
    try:
        yield url, disk
    finally:
        server.stop()


@pytest.mark.timeout(180)
def test_a_database_refusing_writes_for_a_full_disk_says_so_and_clears(
    full_database: tuple[str, Path], settings: Settings, auth: AuthHeader
) -> None:
    url, disk = full_database
    mem = Memstrata.open(settings.model_copy(update={"database_url": url}), embedder=None)
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            assert readyz(client)["database"] == "ok"
            ballast = fill(disk, leave=1024 * 1024)
            refused = None
            for _ in range(40):  # a few hundred KiB each: the 1 MiB left runs out
                answer = client.put(
                    FILES.format("memory"),
                    headers=auth(),
                    json={"content": secrets.token_hex(100 * 1024)},
                )
                if answer.status_code != 200:
                    refused = answer
                    break
            assert refused is not None, "the database never ran out of room"
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "database_unavailable"
            body = readyz(client)
            # The database's disk, which statvfs cannot see from here; the runtime's own
            # directories have room.
            assert body["database"] == "disk_full"
            assert "disk" not in body
            ballast.unlink()
            mem.disk.hold_s = 1.0  # the constant is 30 s; shortened to keep the test short
            written = client.put(
                FILES.format("memory"), headers=auth(), json={"content": "room again"}
            )
            assert written.status_code == 200, written.text
            time.sleep(1.1)
            assert readyz(client)["database"] == "ok"
    finally:
        mem.close()


def test_the_rules() -> None:
    assert is_full(DISK_FULL_BELOW_BYTES - 1, free_inodes=10, total_inodes=100)
    assert not is_full(DISK_FULL_BELOW_BYTES, free_inodes=10, total_inodes=100)
    assert is_full(10 * DISK_FULL_BELOW_BYTES, free_inodes=0, total_inodes=100)  # no inode
    assert not is_full(10 * DISK_FULL_BELOW_BYTES, free_inodes=0, total_inodes=0)  # btrfs


def test_a_refusal_for_a_full_disk_counts_for_the_hold_then_ends() -> None:
    """Fault injection at the narrowest seam: the driver's error for SQLSTATE 53100."""
    now = [100.0]
    watch = DiskWatch([], hold_s=30.0, clock=lambda: now[0])
    watch.record(psycopg.errors.UniqueViolation("another error"))
    assert not watch.database_full()
    watch.record(psycopg.errors.DiskFull('could not extend file "base/1/2"'))
    assert watch.database_full()
    now[0] += 29.9
    assert watch.database_full()
    now[0] += 0.2
    assert not watch.database_full()


def test_a_directory_not_made_yet_is_looked_at_where_it_will_be(tmp_path: Path) -> None:
    assert full_path([tmp_path / "not" / "made" / "yet"]) is None  # tmp_path has room


def test_the_disk_fields_are_in_the_openapi_schema(client: TestClient) -> None:
    doc = client.app.openapi()  # type: ignore[attr-defined]
    answers = doc["paths"]["/readyz"]["get"]["responses"]
    ref = answers["200"]["content"]["application/json"]["schema"]["$ref"]
    readiness = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert {"disk", "disk_path"} <= set(readiness["properties"])
    assert "disk_full" in readiness["properties"]["database"]["description"]
