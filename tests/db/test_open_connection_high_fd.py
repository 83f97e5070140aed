"""``open_connections.answers`` on a connection whose descriptor is above 1023.

``select.select`` cannot watch such a descriptor (ValueError), which ``answers`` read as
"the server does not answer": a process with over a thousand files open (sockets of its
clients, sandboxes) would then have every database connection cut as if the server were
frozen, the first time a new connection timed out.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import psycopg
import pytest

from memstrata.db.open_connections import answers

_HIGH = 1100  # over FD_SETSIZE (1024)


@pytest.fixture
def low_descriptors_taken() -> Iterator[None]:
    """Descriptors 0…_HIGH taken, so the next one opened is above FD_SETSIZE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= _HIGH + 50:
        pytest.fail(f"the open-files limit ({soft}) is too low for this test; raise ulimit -n")
    held: list[int] = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < _HIGH:
            held.append(fd)
        held.append(fd)
        yield
    finally:
        for fd in held:
            os.close(fd)


@pytest.mark.usefixtures("low_descriptors_taken")
def test_a_connection_above_fd_setsize_answers(pg_url: str) -> None:
    url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.pgconn.socket > 1023
        assert answers(conn, timeout_s=5.0)
