"""Bad settings and unreachable parts end every command in one clear line, not a traceback."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.indexer import Indexer


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("MEMSTRATA_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEMSTRATA_LOG_JSON", "false")
    yield


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MEMSTRATA_EMBEDDING_MODELS", "{bad", "MEMSTRATA_EMBEDDING_MODELS: not valid JSON"),
        ("MEMSTRATA_JWT_ALGORITHMS", "HS256", "MEMSTRATA_JWT_ALGORITHMS: not valid JSON"),
        ("MEMSTRATA_LOG_LEVEL", "LOUD", "MEMSTRATA_LOG_LEVEL: must be one of DEBUG"),
        ("MEMSTRATA_API_PREFIX", "/a b", "MEMSTRATA_API_PREFIX: must be a URL path"),
        ("MEMSTRATA_DATABASE_URL", "not a url", "MEMSTRATA_DATABASE_URL: is not a URL"),
        ("MEMSTRATA_DATABASE_URL", "mysql://x/y", "got scheme 'mysql'"),
        ("MEMSTRATA_DATABASE_URL", "sqlite:///x.db", "got scheme 'sqlite'"),
        (
            "MEMSTRATA_DATABASE_URL",
            "postgresql://u:p@127.0.0.1:notaport/db",
            "MEMSTRATA_DATABASE_URL: is not a valid PostgreSQL URL",
        ),
        ("MEMSTRATA_EMBEDDING_BASE_URL", "notaurl", "must be an http:// or https:// URL"),
        (
            "MEMSTRATA_EMBEDDING_MODELS",
            '[{"name": "m", "base_url": "localhost:8808/v1"}]',
            "MEMSTRATA_EMBEDDING_MODELS[0].base_url: must be an http:// or https:// URL",
        ),
        (  # a misspelt key is refused, not dropped
            "MEMSTRATA_EMBEDDING_MODELS",
            '[{"name": "m", "base_url": "http://x/v1", "query_input_typ": "query"}]',
            "MEMSTRATA_EMBEDDING_MODELS[0].query_input_typ: not a key this setting takes; check",
        ),
        # A number with a unit, or a fraction for a whole number: the unit, the range the
        # setting allows and its default as an example.
        (
            "MEMSTRATA_SEARCH_CACHE_BYTES",
            "10MB",
            "; a whole number of bytes, from 1048576 to 1099511627776, e.g. 536870912",
        ),
        (
            "MEMSTRATA_SHUTDOWN_GRACE_S",
            "7.5",
            "; a whole number of seconds, from 0 to 3600, e.g. 15",
        ),
        (
            "MEMSTRATA_EMBEDDING_TIMEOUT_S",
            "5s",
            "; a number of seconds, more than 0 and at most 3600, e.g. 5.0",
        ),
        ("MEMSTRATA_RRF_K", "sixty", "; a whole number, from 1 to 10000, e.g. 60"),
        # Out of range: the range and the default too.
        (
            "MEMSTRATA_MAX_CONTENT_BYTES",
            "-1",
            "MEMSTRATA_MAX_CONTENT_BYTES: Input should be greater than or equal to 1; a whole "
            "number of bytes, from 1 to 67108864, e.g. 262144",
        ),
        (
            "MEMSTRATA_EMBEDDING_SERVER_NICE",
            "20",
            "MEMSTRATA_EMBEDDING_SERVER_NICE: Input should be less than or equal to 19; a whole "
            "number, from 0 to 19, e.g. 10",
        ),
        (
            "MEMSTRATA_EMBEDDING_TIMEOUT_S",
            "0",
            "MEMSTRATA_EMBEDDING_TIMEOUT_S: Input should be greater than 0; a number of seconds, "
            "more than 0 and at most 3600, e.g. 5.0",
        ),
        # Infinite, not a number, or absurdly large: refused at start (they failed at use),
        # with the bound.
        (
            "MEMSTRATA_EMBEDDING_QUERY_TIMEOUT_S",
            "inf",
            "MEMSTRATA_EMBEDDING_QUERY_TIMEOUT_S: Input should be a finite number; a number of "
            "seconds, more than 0 and at most 3600, e.g. 2.0",
        ),
        (
            "MEMSTRATA_EMBEDDING_HEAL_INTERVAL_S",
            "1e10",
            "MEMSTRATA_EMBEDDING_HEAL_INTERVAL_S: Input should be less than or equal to 86400; "
            "a number of seconds, more than 0 and at most 86400, e.g. 2.0",
        ),
        (
            "MEMSTRATA_EMBEDDING_TIMEOUT_PER_TEXT_S",
            "nan",
            "MEMSTRATA_EMBEDDING_TIMEOUT_PER_TEXT_S: Input should be a finite number; a number "
            "of seconds, from 0 to 3600, e.g. 1.0",
        ),
        (
            "MEMSTRATA_SANDBOX_FILE_MODE",
            "999",
            "MEMSTRATA_SANDBOX_FILE_MODE: must be an octal mode like 600 or 0660 (three digits "
            "0-7, a leading 0 allowed); got '999'",
        ),
        # A boolean: the two words to use.
        (
            "MEMSTRATA_MIGRATE_ON_START",
            "maybe",
            "MEMSTRATA_MIGRATE_ON_START: Input should be a valid boolean, unable to interpret "
            "input; true or false",
        ),
    ],
)
def test_a_bad_setting_is_one_line(
    env: None, monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    code, out = run("token", "--user", "a")
    assert code == 1 and out.startswith("error: invalid configuration — ") and message in out
    assert len(out.strip().splitlines()) == 1


def test_prefix_and_level_are_normalised() -> None:
    assert Settings(api_prefix="v1/").api_prefix == "/v1"
    assert Settings(api_prefix="/").api_prefix == ""
    assert Settings(log_level="debug").log_level == "DEBUG"


def test_a_half_configured_embedding_api_is_one_line(
    env: None, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", pg_url)
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1")
    code, out = run("search", "--user", "u", "x")
    assert code == 1 and "MEMSTRATA_EMBEDDING_MODEL is not" in out, out


def test_db_status_against_an_unreachable_server_is_one_line(
    env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", f"postgresql://u:p@127.0.0.1:{port}/db")
    code, out = run("db", "status")
    assert code == 1 and out.startswith("error: cannot connect to PostgreSQL at"), out
    assert ":p@" not in out  # no password
    # libpq's own text ends in "\n\tIs the server running on that host …?"
    assert len(out.strip().splitlines()) == 1, out
    assert "Is the server running" in out


def test_a_missing_template_directory_fails_at_start(
    env: None, monkeypatch: pytest.MonkeyPatch, pg_url: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", pg_url)
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "false")
    monkeypatch.setenv("MEMSTRATA_TEMPLATE_DIR", str(tmp_path / "nonexistent"))
    code, out = run("search", "--user", "u", "x")
    assert code == 1 and "template SOUL.md is missing from" in out, out


def test_reindex_fails_when_vectors_are_still_missing(
    env: None, monkeypatch: pytest.MonkeyPatch, pg_url: str, db: Database
) -> None:
    Indexer(db.sessions, None).index_turn("u", "s", 0, "stored without a vector")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", pg_url)
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_MODEL", "nobody")
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_MAX_RETRIES", "0")
    code, out = run("reindex", "--user", "u")
    assert code == 1 and "1 chunk(s) of u still have no vector" in out, out


SECRET = "s" * 40


@pytest.mark.parametrize("value", [None, "", "  "])
def test_production_refuses_an_unset_database_url(
    env: None, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    """An empty or misspelled MEMSTRATA_DATABASE_URL must not start an embedded database on
    every replica of a production deployment."""
    monkeypatch.setenv("MEMSTRATA_ENVIRONMENT", "production")
    monkeypatch.setenv("MEMSTRATA_JWT_SECRET", SECRET)
    if value is not None:
        monkeypatch.setenv("MEMSTRATA_DATABASE_URL", value)
    code, out = run("db", "status")
    assert code == 1, out
    assert out.strip() == (
        "error: invalid configuration — MEMSTRATA_ENVIRONMENT=production needs "
        "MEMSTRATA_DATABASE_URL: the PostgreSQL URL every replica shares, or `embedded` for "
        "the embedded server in MEMSTRATA_DATA_DIR (one machine only)"
    )
    assert not Path(os.environ["MEMSTRATA_DATA_DIR"], "pgdata").exists()


def test_embedded_is_a_choice_in_production() -> None:
    settings = Settings(environment="production", jwt_secret=SECRET, database_url=" Embedded ")
    assert settings.database_url == "embedded" and settings.external_database_url is None
    url = "postgresql://u@h/db"
    assert Settings(database_url=url).external_database_url == "postgresql+psycopg://u@h/db"
    assert Settings().external_database_url is None  # development: embedded by default


def test_an_unknown_variable_is_named_with_the_closest_setting(
    env: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MEMSTRATA_DATABASE_ULR", "postgresql://u@h/db")
    monkeypatch.setenv("MEMSTRATA_NOTHING_LIKE_IT", "1")
    monkeypatch.setenv("MEMSTRATA_LOCOMO", "locomo.json")  # make bench's, not a setting
    code, _ = run("token", "--user", "a")
    assert code == 0
    warned = {
        f["name"]: f["closest"]
        for f in map(event_fields, caplog.records)
        if f.get("event") == "config.unknown_variable"
    }
    assert warned == {
        "MEMSTRATA_DATABASE_ULR": "MEMSTRATA_DATABASE_URL",
        "MEMSTRATA_NOTHING_LIKE_IT": None,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["token", "--user", "a"], "error: cannot read or create the development secret"),
        (["db", "status"], "error: cannot create"),
    ],
)
def test_an_unusable_data_dir_is_one_line(
    env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], message: str
) -> None:
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(not_a_dir / "data"))
    code, out = run(*args)
    assert code == 1 and out.startswith(message), out
    assert "MEMSTRATA_DATA_DIR" in out and len(out.strip().splitlines()) == 1
