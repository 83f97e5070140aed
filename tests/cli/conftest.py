"""Fixtures shared by the ``memstrata user`` command tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.cli_env import clean_env


@pytest.fixture
def boxes(monkeypatch: pytest.MonkeyPatch, pg_url: str, tmp_path: Path) -> Path:
    """The CLI's environment on the test database, with a sandbox root of its own."""
    root = tmp_path / "boxes"
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATABASE_URL": pg_url,
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_SANDBOX_ROOT": str(root),
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        },
    )
    return root
