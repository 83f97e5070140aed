"""What the embedded server says when it starts: a failure in words an operator can act
on, and a new (empty) database as a warning.

A full disk is real (a small tmpfs, ``tests/small_fs.py``; skipped where mounting is not
allowed); the message rules are also checked on PostgreSQL's output as initdb wrote it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from memstrata.db.embedded import EmbeddedPostgres, postgres_says, start_failure
from memstrata.db.embedded_perms import grant_traverse
from memstrata.errors import DatabaseSetupError
from memstrata.logs import event_fields
from tests.small_fs import SmallFs, small_fs  # noqa: F401  (a fixture)

# What initdb wrote to stderr on a full disk (a run on a 8 MiB tmpfs).
INITDB_FULL = [
    '2026-12-05 09:42:23.872 UTC [18150] FATAL:  could not write to file "pg_wal/xlogtemp.'
    '18150": No space left on device',
    "child process exited with exit code 1",
    'initdb: removing contents of data directory "/srv/memstrata/pgdata"',
]
INITDB = subprocess.CalledProcessError(1, ["/venv/pginstall/bin/initdb", "-D", "/x"])


def created_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        event_fields(r) | {"level": r.levelname}
        for r in caplog.records
        if r.getMessage() == "db.embedded.created"
    ]


@pytest.mark.timeout(120)
def test_a_first_start_is_info_a_lost_database_a_warning_an_existing_one_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A first start, in a data directory that held nothing, creates the database: that is
    normal (it was a WARNING on every first start). A data directory that held other
    files of memstrata's (its lock directory, the sandboxes) but no cluster lost it: an
    operator who changed MEMSTRATA_DATA_DIR or removed pgdata got an empty database."""
    grant_traverse(tmp_path / "new")  # the host's directories above it: not this test's
    with caplog.at_level(logging.INFO, logger="memstrata"):
        server = EmbeddedPostgres(tmp_path / "new")
        server.start()
        server.stop()
        [created] = created_events(caplog)
        assert created["level"] == "INFO"
        assert created["pgdata"] == str((tmp_path / "new" / "pgdata").resolve())
        assert "MEMSTRATA_DATA_DIR" in str(created["effect"])
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        caplog.clear()
        again = EmbeddedPostgres(tmp_path / "new")  # the same directory, a later start
        again.start()
        again.stop()
        assert created_events(caplog) == []

        caplog.clear()
        (tmp_path / "moved" / "sandboxes" / "alice").mkdir(parents=True)
        moved = EmbeddedPostgres(tmp_path / "moved")
        moved.start()
        moved.stop()
        [created] = created_events(caplog)
        assert created["level"] == "WARNING"
        assert "MEMSTRATA_DATA_DIR" in str(created["effect"])
        assert "sandboxes" in str(created["effect"])


@pytest.mark.skipif(os.geteuid() != 0, reason="the server's user is granted search only as root")
def test_search_granted_on_the_data_directory_is_info_above_it_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As root, the data directory (memstrata's own, made 0700) needs search permission
    for the server's user: normal, INFO. A directory above it is the host's: changing it
    (``/root`` to 711) is for the operator to see, WARNING."""
    from memstrata.db.embedded_runtime import _traverse_only

    outer = tmp_path / "outer"
    data = outer / "data"
    (data / "pgdata").mkdir(parents=True)
    for directory in (tmp_path, outer, data):
        directory.chmod(0o755)
    data.chmod(0o700)
    with caplog.at_level(logging.INFO, logger="memstrata"):
        _traverse_only(data / "pgdata")
        outer.chmod(0o700)
        data.chmod(0o700)
        _traverse_only(data / "pgdata")
    granted = [
        (r.levelname, event_fields(r)["directories"])
        for r in caplog.records
        if r.getMessage() == "db.embedded.search_granted"
    ]
    assert granted == [("INFO", [str(data)]), ("WARNING", [str(data), str(outer)])]


@pytest.mark.timeout(120)
def test_a_start_on_a_full_disk_says_so_and_names_no_missing_log(
    small_fs: SmallFs,  # noqa: F811
) -> None:
    """It said "… returned non-zero exit status 1.. See <pgdata>/log", a file initdb never
    wrote; the reason was in a multi-line log record only."""
    disk = small_fs("8m")  # less than a new cluster takes
    with pytest.raises(DatabaseSetupError) as raised:
        EmbeddedPostgres(disk / "data").start()
    message = str(raised.value)
    pgdata = (disk / "data" / "pgdata").resolve()
    assert "\n" not in message
    assert "creating the database cluster (initdb) failed" in message
    assert "No space left on device" in message
    assert f"the file system of {pgdata.parent} is full" in message
    assert "MEMSTRATA_DATA_DIR" in message and "MEMSTRATA_DATABASE_URL" in message
    assert not (pgdata / "log").exists()
    assert str(pgdata / "log") not in message


def test_the_message_quotes_postgres_and_names_a_full_disk(tmp_path: Path) -> None:
    """The same rule where no small file system can be mounted: initdb's real output."""
    pgdata = tmp_path / "pgdata"
    message = start_failure(pgdata, INITDB, INITDB_FULL)
    assert message == (
        f"could not start the embedded PostgreSQL in {pgdata}: creating the database "
        "cluster (initdb) failed with exit status 1; PostgreSQL said: FATAL: could not "
        'write to file "pg_wal/xlogtemp.18150": No space left on device; the file system '
        f"of {tmp_path} is full: free some space there, or set MEMSTRATA_DATA_DIR to a "
        "directory with room (a new database takes about 40 MB); or set "
        "MEMSTRATA_DATABASE_URL to use another server"
    )


def test_a_server_that_wrote_its_log_is_quoted_and_named(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "log").write_text(
        "2026-12-05 10:00:00.000 UTC [7] LOG:  starting PostgreSQL 18\n"
        '2026-12-05 10:00:00.001 UTC [7] LOG:  syntax error in file "postgresql.conf" line 9\n'
        '2026-12-05 10:00:00.002 UTC [7] FATAL:  configuration file "postgresql.conf" contains '
        "errors\n"
    )
    pg_ctl = subprocess.CalledProcessError(1, ["/venv/pginstall/bin/pg_ctl", "start"])
    message = start_failure(pgdata, pg_ctl, ["pg_ctl: could not start server"])
    assert "starting the server (pg_ctl) failed with exit status 1" in message
    assert (
        'PostgreSQL said: LOG: syntax error in file "postgresql.conf" line 9 / FATAL: '
        'configuration file "postgresql.conf" contains errors' in message
    )
    assert f"PostgreSQL's log: {pgdata / 'log'}" in message
    assert "is full" not in message


def test_what_postgres_said() -> None:
    assert postgres_says(INITDB_FULL) == [
        'FATAL: could not write to file "pg_wal/xlogtemp.18150": No space left on device'
    ]
    assert postgres_says(["first", "", "second", "third"]) == ["second", "third"]
    assert postgres_says([]) == []
