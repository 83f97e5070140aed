from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from memstrata.api.app import create_app
from memstrata.config import Settings, unset_database_problem
from memstrata.config_doc import render
from tests.mcp.stdio_driver import call, read_answers, started, stop


def test_configuration_doc_is_current() -> None:
    doc = Path(__file__).parents[1] / "docs" / "CONFIGURATION.md"
    assert doc.read_text(encoding="utf-8") == render(), (
        "run: python -m memstrata.config_doc > docs/CONFIGURATION.md"
    )


def test_every_field_is_described() -> None:
    assert all(f.description for f in Settings.model_fields.values())


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("postgres://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("", None),
    ],
)
def test_database_url_is_normalised(raw: str, expected: str | None) -> None:
    assert Settings(database_url=raw).database_url == expected


def test_production_needs_a_database_url_and_no_jwt_setting() -> None:
    """The JWT settings are checked where tokens are verified or signed (memstrata.api.auth;
    tests/cli/test_production_keys.py), so a migration job needs no secret; the database
    URL where a database is opened (tests/cli/test_token_settings.py), so minting a token
    needs none."""
    unset = Settings(environment="production", jwt_secret="x" * 32)
    assert "needs MEMSTRATA_DATABASE_URL" in (unset_database_problem(unset) or "")
    external = "postgresql://u@h/db"
    assert unset_database_problem(Settings(environment="production", database_url=external)) is None
    assert Settings(environment="production", database_url=external).jwt_secret is None
    short = Settings(environment="production", jwt_secret="short", database_url=external)
    assert short.jwt_secret == "short"


def test_a_file_limit_above_the_request_limit_starts_and_such_a_file_saves_over_mcp(
    tmp_path: Path, pg_url: str
) -> None:
    """MCP's whole-file calls take the body limit of a file's PUT (``file_request_bytes``)
    over stdio and /mcp alike, so a file limit above the request limit conflicts with
    nothing: a process that takes requests starts, and a file between the two limits
    saves through ``memory_write``. Such a process was refused at start-up."""
    content = "between the limits\n" * 1700  # 32,300 bytes: over 16 KiB, under 64 KiB
    process, log = started(
        tmp_path,
        "big-file",
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_EMBEDDING_AUTOSTART="false",  # BM25 only: nothing here searches
        MEMSTRATA_MAX_CONTENT_BYTES="65536",
        MEMSTRATA_MAX_REQUEST_BYTES="16384",
    )
    assert process.stdin is not None

    def ask(request_id: int, tool: str, arguments: dict[str, object]) -> dict[str, Any]:
        assert process.stdin is not None
        process.stdin.write(call(request_id, tool, arguments))
        process.stdin.flush()
        (answer,) = read_answers(process, until_id=request_id, timeout_s=60)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    try:
        version = ask(2, "memory_read", {"name": "memory"})["structuredContent"]["version"]
        write = {"name": "memory", "content": content, "expected_version": version}
        written = ask(3, "memory_write", {**write, "replace_all": True})
        read = ask(4, "memory_read", {"name": "memory"})
    finally:
        stop(process)
    assert written["isError"] is False, (written, log.read_text())
    assert read["structuredContent"]["content"] == content
    create_app(Settings(max_content_bytes=65536, max_request_bytes=16384))  # no refusal


def test_alg_none_is_refused() -> None:
    with pytest.raises(ValidationError, match="none"):
        Settings(jwt_algorithms=["HS256", "none"])


def test_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTRATA_DECAY_FLOOR", "0.5")
    monkeypatch.setenv("MEMSTRATA_MAX_CONTENT_BYTES", "abc")
    with pytest.raises(ValidationError, match="max_content_bytes"):
        Settings()
    monkeypatch.setenv("MEMSTRATA_MAX_CONTENT_BYTES", "1024")
    assert (Settings().decay_floor, Settings().max_content_bytes) == (0.5, 1024)


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("MEMSTRATA_EMBEDDING_SERVER_NICE", "20", "embedding_server_nice"),
        ("MEMSTRATA_EMBEDDING_SERVER_NICE", "-1", "embedding_server_nice"),
        ("MEMSTRATA_EMBEDDING_SERVER_THREADS", "two", "embedding_server_threads"),
        ("MEMSTRATA_EMBEDDING_QUERY_SERVER_THREADS", "-2", "embedding_query_server_threads"),
    ],
)
def test_local_embedding_server_settings_are_checked(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=field):
        Settings()


def test_embedding_urls_are_taken_without_surrounding_whitespace() -> None:
    """Checked stripped, the value once went on with its spaces and failed at the first
    embedding ("%20http://…": an unsupported protocol)."""
    settings = Settings(
        embedding_base_url=" http://127.0.0.1:9/v1\n",
        embedding_models=[
            {"name": "m", "base_url": "\thttp://h/v1 ", "query_base_url": " http://q/v1"}
        ],
    )
    assert settings.embedding_base_url == "http://127.0.0.1:9/v1"
    model = settings.embedding_models[0]
    assert (model.base_url, model.query_base_url) == ("http://h/v1", "http://q/v1")


@pytest.mark.parametrize("value", ["0", "-1", "61", "fast"])
def test_the_database_check_interval_is_checked(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # 0 would make the monitor spin on the database; over a minute a lost database would
    # go unnoticed (and unrestarted) for that long.
    monkeypatch.setenv("MEMSTRATA_DB_CHECK_INTERVAL_S", value)
    with pytest.raises(ValidationError, match="db_check_interval_s"):
        Settings()
    monkeypatch.setenv("MEMSTRATA_DB_CHECK_INTERVAL_S", "0.25")
    assert Settings().db_check_interval_s == 0.25


def test_every_environment_is_described() -> None:
    """`test` was accepted but undocumented: each value says what it changes."""
    field = Settings.model_fields["environment"]
    assert field.description is not None
    for value in get_args(field.annotation):
        assert re.search(rf"(^|[.;] ){value} ", field.description), value


def test_the_test_environment_is_between_development_and_production(tmp_path: Path) -> None:
    """What the description of `test` says: tokens as in production (an explicit key, of
    any length), the database as in development (unset is the embedded server)."""
    from memstrata.api.token_keys import AuthConfigurationError, require_token_keys

    settings = Settings(environment="test", data_dir=tmp_path)
    assert unset_database_problem(settings) is None
    with pytest.raises(AuthConfigurationError, match="needs MEMSTRATA_JWT_SECRET"):
        require_token_keys(settings)
    require_token_keys(settings.model_copy(update={"jwt_secret": "short"}))
    assert not (tmp_path / "jwt_secret").exists()


def test_the_doc_says_which_env_file_is_read() -> None:
    head = " ".join(render().split("| variable |")[0].split())
    assert "`.env` of the working directory" in head
    assert "config.unknown_variable" in head


def _is_number(annotation: object) -> bool:
    return annotation in (int, float) or bool({int, float} & set(get_args(annotation)))


NUMBER_SETTINGS = [n for n, f in Settings.model_fields.items() if _is_number(f.annotation)]


def _upper_bound(name: str) -> object:
    field = Settings.model_fields[name]
    bounds = [getattr(c, k, None) for c in field.metadata for k in ("le", "lt")]
    return next((b for b in bounds if b is not None), None)


def test_the_number_settings_are_all_found() -> None:
    assert len(NUMBER_SETTINGS) > 40 and "embedding_query_timeout_s" in NUMBER_SETTINGS


@pytest.mark.parametrize("name", NUMBER_SETTINGS)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e10", "100000000000000000000"])
def test_no_number_setting_takes_infinity_or_an_absurd_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """`inf` or 1e10 seconds was taken at start-up and failed at use: every search 500
    (a timeout past time_t), the re-embedding thread dead (a heal interval of inf)."""
    monkeypatch.setenv(f"MEMSTRATA_{name.upper()}", value)
    with pytest.raises(ValidationError, match=name):
        Settings()


@pytest.mark.parametrize("name", NUMBER_SETTINGS)
def test_every_number_setting_says_its_upper_bound(name: str) -> None:
    """Declared on the field (so the CLI's refusal names it) and explained in its
    description; the one written out in a validator (a share) says it there."""
    bound = _upper_bound(name)
    description = (Settings.model_fields[name].description or "").lower()
    if name == "embedding_express_share":
        assert bound is None and "at most 1" in description
        return
    assert bound is not None, name
    assert f"at most {bound}" in description or f"to {bound}" in description, description
