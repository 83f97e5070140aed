"""The text log format: one event, one line, whatever the client put in a field."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import JsonFormatter, TextFormatter, log_event


def _format(event: str, formatter: logging.Formatter | None = None, **fields: object) -> str:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("memstrata.test_logs")
    logger.propagate = False
    handler = Keep()
    logger.addHandler(handler)
    try:
        log_event(logger, event, logging.WARNING, **fields)
    finally:
        logger.removeHandler(handler)
    return (formatter or TextFormatter()).format(records[0])


def test_a_forged_line_in_a_field_stays_on_its_line() -> None:
    """A URL path or a token's kid, sent before authentication, wrote fake log lines."""
    line = _format(
        "auth.token.foreign_key",
        kid="zz\nerror   memstrata.api.auth: auth.token.accepted user_id=admin",
        path="/x\r\n\x1b[31mred\u2028",
    )
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "\u2028" not in line
    assert 'kid="zz\\nerror   memstrata.api.auth: auth.token.accepted user_id=admin"' in line
    assert 'path="/x\\r\\n\\u001b[31mred\\u2028"' in line


def test_ordinary_text_is_written_as_it_is_and_a_tab_escaped() -> None:
    line = _format("sync.file", user_id="阿丽", file="USER.md", detail="tab\tkept? no")
    assert line.startswith("warning memstrata.test_logs: sync.file user_id=阿丽 file=USER.md")
    assert line.endswith('detail="tab\\tkept? no"')


def test_a_field_value_cannot_pass_for_another_field() -> None:
    """A user id like ``x user_id=admin`` (ids are opaque strings) was written as it is,
    and a text log read as if the event named the user ``admin``."""
    line = _format("auth.denied", user_id='x user_id=admin "y"', route="/api/memory/search")
    assert 'user_id="x user_id=admin \\"y\\""' in line
    assert line.endswith("route=/api/memory/search")
    assert _logfmt_fields(line)["user_id"] == 'x user_id=admin "y"'
    assert 'empty=""' in _format("auth.denied", empty="")


def _logfmt_fields(line: str) -> dict[str, str]:
    """The fields of a text line, read back the way a logfmt reader does."""
    fields: dict[str, str] = {}
    rest = line.split(": ", 1)[1].split(" ", 1)[1]
    decoder = json.JSONDecoder()
    while rest:
        key, rest = rest.split("=", 1)
        if rest.startswith('"'):
            value, end = decoder.raw_decode(rest)
            rest = rest[end:].lstrip()
        else:
            value, _, rest = rest.partition(" ")
        fields[key] = value
    return fields


def test_bidi_controls_are_escaped_in_a_text_line() -> None:
    """U+202E shows the rest of a line reversed on a terminal that does bidi."""
    line = _format("http.request", path="/api/\u202egnp.exe")
    assert "\u202e" not in line and "path=/api/\\u202egnp.exe" in line


def test_a_json_line_escapes_what_a_terminal_acts_on_and_parses_back_the_same() -> None:
    """JSON escapes C0 by itself but left C1 (0x9b is a CSI to xterm) and bidi controls
    raw: a JSON log read on a terminal acted on them."""
    fields = {"path": "/x\x9b2J\u202eevil\x1b[31m\u2028", "user_id": "阿丽"}
    line = _format("http.request", JsonFormatter(), **fields)
    assert not any(c in line for c in "\x9b\u202e\x1b\n\u2028")
    assert "阿丽" in line  # other non-ASCII text as it is
    parsed = json.loads(line)
    assert {k: parsed[k] for k in fields} == fields


def test_a_first_start_logs_the_migration_once(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A new database (no pgvector, no schema) logged db.upgraded twice and Alembic's
    "Context impl PostgresqlImpl." / "Will assume transactional DDL." 7 times; a start on
    a migrated one logs neither."""
    name = "first_start_logs"
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
        settings = Settings(environment="test", database_url=url, data_dir=tmp_path)
        for start, once in ((1, 1), (2, 0)):
            caplog.clear()
            # Per logger: an earlier test's configure_logging may have set memstrata's and
            # alembic's to WARNING (a short CLI command's level).
            with (
                caplog.at_level(logging.INFO),
                caplog.at_level(logging.INFO, "memstrata"),
                caplog.at_level(logging.INFO, "alembic"),
            ):
                Database.open(settings).close()
            said = Counter(r.getMessage() for r in caplog.records)
            assert said["Context impl PostgresqlImpl."] == once, (start, said)
            assert said["Will assume transactional DDL."] == once, (start, said)
            assert said["db.upgraded"] == once, (start, said)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
