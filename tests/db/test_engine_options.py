"""Engine options that keep users' text out of logs and a dead server from hanging us."""

from __future__ import annotations

import socket
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DataError, OperationalError

from memstrata.db.database import Database
from memstrata.db.engine import CONNECT_ARGS, make_engine


def test_a_failed_statement_does_not_carry_its_parameters(db: Database) -> None:
    # str(exc) of a DBAPIError is what error logs and 503 details showed: it listed the
    # statement's parameters, i.e. users' memory files and conversation turns.
    with pytest.raises(DataError) as caught, db.engine.connect() as conn:
        conn.execute(text("SELECT CAST(:x AS text), 1 / 0"), {"x": "PRIVATE-DIARY-ENTRY"})
    assert "PRIVATE-DIARY-ENTRY" not in str(caught.value)


def test_a_server_that_never_answers_fails_within_the_connect_timeout() -> None:
    # It accepts the TCP connection and says nothing (a hung server, a black-holing proxy):
    # without a timeout, start-up and every request waited for good.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        engine = make_engine(f"postgresql+psycopg://u:p@127.0.0.1:{port}/db")
        started = time.monotonic()
        with pytest.raises(OperationalError, match="timeout"):
            engine.connect()
        assert time.monotonic() - started < CONNECT_ARGS["connect_timeout"] + 5
