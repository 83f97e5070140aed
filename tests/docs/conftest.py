"""One ``memstrata serve`` for every example of the docs (tests/docs/served.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from tests.conftest import TABLES
from tests.docs.served import Served, serving


@pytest.fixture(scope="package")
def served(
    pg_url: str,
    database: Database,
    embedding_server: LocalEmbeddingServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    """On the session's PostgreSQL with empty tables (the docs' user is new) and its
    embedding server."""
    if shutil.which("curl") is None:
        pytest.fail("curl is not installed: the docs' examples use it (apt-get install curl)")
    with database.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    with serving(pg_url, embedding_server, tmp_path_factory.mktemp("docs")) as served:
        yield served
