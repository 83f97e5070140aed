"""A data directory too long for the embedded server's socket is refused before the wheel
runs: the wheel would put the socket where other local users reach a server that trusts
every local connection (``memstrata.db.embedded_socket``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.embedded_socket import SOCKET_NAME, socket_fits
from memstrata.errors import DatabaseSetupError


def deep(base: Path, length: int) -> Path:
    """A directory under ``base`` whose ``pgdata`` socket path is ``length`` bytes."""
    room = length - len(str(base)) - len(f"/pgdata/{SOCKET_NAME}") - 1
    assert room > 0
    return base / ("d" * room)


def test_a_data_directory_too_long_for_the_socket_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    data_dir = deep(tmp_path, 200)
    with pytest.raises(DatabaseSetupError) as refused:
        EmbeddedPostgres(data_dir).start()
    message = str(refused.value)
    assert "MEMSTRATA_DATA_DIR" in message and "without a password" in message
    assert not (data_dir / "pgdata").exists()  # no initdb, no server


def test_socket_fits_tells_the_limit_whether_the_directory_exists_or_not(
    tmp_path: Path,
) -> None:
    assert socket_fits(tmp_path / SOCKET_NAME)
    assert socket_fits(tmp_path / "missing" / SOCKET_NAME)
    assert not socket_fits(deep(tmp_path, 200) / "pgdata" / SOCKET_NAME)
    # Linux's limit: 107 bytes fit, 108 do not.
    fits = tmp_path / ("f" * (107 - len(str(tmp_path)) - 1))
    assert len(str(fits).encode()) == 107 and socket_fits(fits)
    assert not socket_fits(Path(str(fits) + "x"))
