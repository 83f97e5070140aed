"""`memstrata db url`: the URL psql, pg_dump and pg_restore connect with (docs/DEPLOY.md,
"Backup and restore"). ``MEMSTRATA_DATABASE_URL`` in libpq's form, its password masked
unless asked for; the embedded server's socket while it runs, and exit status 2, saying
how to start it, while it does not. Each URL printed is used for real by the wheel's
PostgreSQL 18 programs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import make_url

from memstrata.db.embedded import EmbeddedPostgres
from tests.cli.cli_env import clean_env, run_cli
from tests.db.read_only import BIN

EXTERNAL = "postgresql+psycopg://bob:s3cr%40t@db.example:5433/mem?sslmode=require"


def _psql(url: str, sql: str) -> str:
    done = subprocess.run(
        [str(BIN / "psql"), "-d", url, "-Atc", sql],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_external_url_in_libpq_form_with_the_password_masked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": EXTERNAL})
    assert run_cli("db", "url") == (
        0,
        "postgresql://bob:***@db.example:5433/mem?sslmode=require\n",
        "",
    )
    code, out, _ = run_cli("db", "url", "--show-password")
    assert (code, out) == (0, "postgresql://bob:s3cr%40t@db.example:5433/mem?sslmode=require\n")


def test_a_password_in_the_query_is_masked_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libpq also reads a password from ``?password=``: it was printed as it was."""
    url = "postgresql+psycopg://bob@db.example/mem?password=s3cret&sslpassword=k3y&sslmode=require"
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": url})
    code, out, _ = run_cli("db", "url")
    assert (code, out) == (
        0,
        "postgresql://bob@db.example/mem?password=***&sslmode=require&sslpassword=***\n",
    )
    assert "s3cret" in run_cli("db", "url", "--show-password")[1]


def test_the_external_url_printed_is_one_psql_connects_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pg_url: str
) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": pg_url})
    code, out, _ = run_cli("db", "url", "--show-password")
    assert code == 0 and out.startswith("postgresql://postgres@/")
    assert _psql(out.strip(), "SELECT current_database()") == make_url(pg_url).database


def test_the_embedded_servers_socket_url_while_it_runs_and_how_to_start_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path_factory.mktemp("u")  # short: the socket's path must fit in 107 bytes
    pgdata = data.resolve() / "pgdata"
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(data)})

    code, out, err = run_cli("db", "url")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: there is no embedded PostgreSQL in {pgdata}"), err

    server = EmbeddedPostgres(data)
    server.start()  # as `memstrata serve` of this data directory would
    try:
        code, out, err = run_cli("db", "url")
        assert (code, err) == (0, "")
        url = out.strip()
        assert url == f"postgresql://postgres@/memstrata?host={pgdata}&port=5432"
        assert _psql(url, "SELECT current_database()") == "memstrata"
        dump = tmp_path / "memstrata.dump"
        done = subprocess.run(
            [str(BIN / "pg_dump"), "-Fc", "-d", url, "-f", str(dump)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0 and dump.stat().st_size > 0, done.stderr
    finally:
        server.stop()

    code, out, err = run_cli("db", "url")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: the embedded PostgreSQL in {pgdata} is not running"), err
    assert "memstrata serve" in err and "pg_ctl" in err


def test_an_unused_data_directory_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = (tmp_path / "unused").resolve()
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(data)})
    code, out, err = run_cli("db", "url")
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"error: there is no embedded PostgreSQL in {data / 'pgdata'}: MEMSTRATA_DATA_DIR="
        f"{data} is not a data directory memstrata has run in (the memory may be in "
        "another); set MEMSTRATA_DATA_DIR to the one `memstrata serve` uses, or start one "
        "here with `memstrata serve`"
    )


def test_help_names_the_exit_statuses() -> None:
    code, out, _ = run_cli("db", "url", "--help")
    said = " ".join(out.replace("│", " ").split())
    assert code == 0
    assert "Exit status 0" in said and "1" in said and "2 when the embedded server" in said
