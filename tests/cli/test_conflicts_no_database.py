"""`memstrata conflicts` reads the sandbox alone: it works in production with no
MEMSTRATA_DATABASE_URL, while the database is down, and starts no embedded server; and
the sandboxes it reads are the ones the runtime builds from the same settings."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata
from memstrata.sandbox.build import build_sandboxes
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.state import CONFLICT_DIR
from tests.api.test_conflicts import AGENT, NAME, plant, sandbox_dir
from tests.cli.cli_env import clean_env, run_cli


def closed_port() -> int:
    """A TCP port nothing listens on (the OS's pick, released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


DOWN = f"postgresql://memstrata@127.0.0.1:{closed_port()}/memstrata"


@pytest.mark.parametrize(
    "environment",
    [
        {"MEMSTRATA_ENVIRONMENT": "production"},  # refused an unset URL: a database opened
        {"MEMSTRATA_ENVIRONMENT": "production", "MEMSTRATA_DATABASE_URL": DOWN},
        {"MEMSTRATA_ENVIRONMENT": "development"},  # started an embedded server
    ],
    ids=["production-unset", "production-down", "development-unset"],
)
def test_list_show_dismiss_need_no_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, environment: dict[str, str]
) -> None:
    data = tmp_path / "data"
    clean_env(
        monkeypatch,
        tmp_path,
        {"MEMSTRATA_DATA_DIR": str(data), "MEMSTRATA_SANDBOX_ROOT": str(tmp_path / "boxes")}
        | environment,
    )
    settings = Settings()
    plant(settings, "alice", NAME, AGENT)

    code, out, err = run_cli("conflicts", "list", "--user", "alice")
    assert (code, err) == (0, "")
    assert out.splitlines()[1].split()[:3] == [NAME, "memory", "conflict"]
    assert run_cli("conflicts", "show", "--user", "alice", NAME)[:2] == (0, AGENT)
    assert run_cli("conflicts", "dismiss", "--user", "alice", NAME) == (
        0,
        f"dismissed {NAME}\n",
        "",
    )
    assert not (sandbox_dir(settings, "alice") / CONFLICT_DIR / NAME).exists()
    assert not (data / "pgdata").exists()  # no embedded server either


def test_the_sandboxes_are_the_runtimes(db: Database, settings: Settings) -> None:
    """The one construction of ``mem.sandboxes``, with settings that change each part."""
    settings = settings.model_copy(
        update={"sandbox_file_mode": "660", "sandbox_timeout_s": 2.5, "max_content_bytes": 8 << 20}
    )
    mem = Memstrata.open(settings, database=db, embedder=None)
    try:
        runtimes, alone = mem.sandboxes, build_sandboxes(settings)
    finally:
        mem.pool.close()  # the shared database stays open
    assert type(alone) is type(runtimes)
    assert alone.timeout_s == runtimes.timeout_s == 2.5
    assert isinstance(alone.inner, LocalSandboxProvider)
    assert isinstance(runtimes.inner, LocalSandboxProvider)
    for inner in (alone.inner, runtimes.inner):
        assert (inner.root, inner.file_mode, inner.max_read_bytes) == (
            settings.resolved_sandbox_root,
            0o660,
            32 << 20,
        )
