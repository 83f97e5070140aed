"""What ``memstrata serve`` allows but warns about at start-up, one WARNING each.

- development (the default environment) served beyond this machine (``--host 0.0.0.0``):
  a generated secret signs its tokens and production's checks are off;
- production without ``MEMSTRATA_JWT_MAX_LIFETIME_S``: any ``exp`` is accepted (even
  10^30), and a deployment may rely on that, so it is not refused;
- a data directory or sandbox root that other accounts may list or write (mode & 0o006;
  search alone is what the embedded server's own user needs as root), with the chmod that
  closes it. A group may be let in (the shared-group
  set-up, ``MEMSTRATA_SANDBOX_FILE_MODE=660``).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memstrata.cli.serve import log_startup_warnings
from memstrata.config import Settings
from memstrata.logs import event_fields
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.log_lines import events_in

SECRET = "production-secret-that-is-long-enough-0123456789"
EVENTS = (
    "serve.development_beyond_loopback",
    "auth.token_lifetime_unbounded",
    "serve.directory_open_to_others",
)


def _warnings(caplog: pytest.LogCaptureFixture, settings: Settings, address: str) -> list[Any]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memstrata.cli.serve"):
        log_startup_warnings(settings, address)
    return [
        (record.levelno, event_fields(record)) for record in caplog.records if event_fields(record)
    ]


def _private_dirs(tmp_path: Path, mode: int = 0o700) -> tuple[Path, Path]:
    data, boxes = tmp_path / "data", tmp_path / "data" / "sandboxes"
    boxes.mkdir(parents=True)
    data.chmod(mode)
    boxes.chmod(mode)
    return data, boxes


@pytest.mark.parametrize(
    ("address", "warned"),
    [("0.0.0.0", True), ("::", True), ("192.168.1.20", True), ("127.0.0.1", False), ("::1", False)],
)
def test_development_beyond_loopback(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, address: str, warned: bool
) -> None:
    data, _ = _private_dirs(tmp_path)
    seen = _warnings(caplog, Settings(environment="development", data_dir=data), address)
    if not warned:
        assert seen == []
        return
    [(level, fields)] = seen
    assert level == logging.WARNING
    assert fields["event"] == "serve.development_beyond_loopback"
    assert fields["address"] == address
    assert "127.0.0.1" in fields["fix"] and "MEMSTRATA_ENVIRONMENT=production" in fields["fix"]


def test_production_without_a_token_lifetime_bound(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    data, _ = _private_dirs(tmp_path)
    production = Settings(environment="production", data_dir=data, jwt_secret=SECRET)
    [(level, fields)] = _warnings(caplog, production, "0.0.0.0")  # nothing about the bind
    assert (level, fields["event"]) == (logging.WARNING, "auth.token_lifetime_unbounded")
    assert "MEMSTRATA_JWT_MAX_LIFETIME_S" in fields["fix"]
    bounded = production.model_copy(update={"jwt_max_lifetime_s": 86400.0})
    assert _warnings(caplog, bounded, "0.0.0.0") == []
    # Only production is told: a test or development server is not a deployment.
    for environment in ("test", "development"):
        other = production.model_copy(update={"environment": environment})
        assert _warnings(caplog, other, "127.0.0.1") == []


@pytest.mark.parametrize(
    ("data_mode", "boxes_mode", "open_ones"),
    [
        (0o755, 0o700, ["MEMSTRATA_DATA_DIR"]),
        (0o700, 0o777, ["MEMSTRATA_SANDBOX_ROOT"]),
        (0o702, 0o704, ["MEMSTRATA_DATA_DIR", "MEMSTRATA_SANDBOX_ROOT"]),
        (0o711, 0o701, []),  # search alone: the embedded server's user passes through
        (0o750, 0o770, []),  # a group, not others: the shared-group set-up
        (0o700, 0o700, []),
    ],
)
def test_a_directory_open_to_others(
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    data_mode: int,
    boxes_mode: int,
    open_ones: list[str],
) -> None:
    data, boxes = tmp_path / "my data", tmp_path / "my data" / "sandboxes"
    boxes.mkdir(parents=True)
    data.chmod(data_mode)
    boxes.chmod(boxes_mode)
    seen = _warnings(caplog, Settings(environment="development", data_dir=data), "127.0.0.1")
    assert [fields["setting"] for _, fields in seen] == open_ones
    shown = {
        "MEMSTRATA_DATA_DIR": (data, data_mode, "chmod o-rw"),
        "MEMSTRATA_SANDBOX_ROOT": (boxes, boxes_mode, "chmod -R o-rwx"),  # its old files too
    }
    for level, fields in seen:
        assert (level, fields["event"]) == (logging.WARNING, "serve.directory_open_to_others")
        path, mode, chmod = shown[fields["setting"]]
        assert (fields["path"], fields["mode"]) == (str(path), f"{mode:o}")
        assert fields["fix"] == f"{chmod} '{path}'"  # quoted for the shell: a space in it


def test_a_sandbox_root_not_made_yet_is_not_checked(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    missing = tmp_path / "not yet"
    settings = Settings(environment="development", data_dir=data, sandbox_root=missing)
    assert _warnings(caplog, settings, "127.0.0.1") == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("environment", ["development", "production"])
def test_serve_logs_them_before_it_serves(tmp_path: Path, pg_url: str, environment: str) -> None:
    data, boxes = _private_dirs(tmp_path)
    boxes.chmod(0o777)  # as an older release or a careless mkdir left it
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(data),
        "MEMSTRATA_ENVIRONMENT": environment,
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        **({"MEMSTRATA_JWT_SECRET": SECRET} if environment == "production" else {}),
    }
    port = free_port()
    log = tmp_path / "serve.log"
    # Development beyond this machine: every interface (the port is free and the server
    # is stopped at once); production on loopback.
    host = "0.0.0.0" if environment == "development" else "127.0.0.1"
    with log.open("wb") as output:
        process = start_serve(env, port, host=host, stdout=subprocess.DEVNULL, stderr=output)
    try:
        wait_ready(process, f"http://127.0.0.1:{port}", timeout_s=60, path="/healthz")
    finally:
        stop_serve(process)
    warned = [e for e in events_in(log) if e.get("event") in EVENTS]
    assert all(e["level"] == "warning" for e in warned), warned
    expected = {
        "development": ["serve.development_beyond_loopback", "serve.directory_open_to_others"],
        "production": ["auth.token_lifetime_unbounded", "serve.directory_open_to_others"],
    }
    assert [e["event"] for e in warned] == expected[environment]
    assert warned[-1]["fix"] == f"chmod -R o-rwx {boxes}"
