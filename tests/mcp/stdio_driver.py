"""Driving a real ``memstrata mcp --user U`` process line by line, for the stdio tests
that need what the SDK's client hides: the raw bytes sent, stdin closed mid-request, a
client that stops reading stdout."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from tests.cli.cli_env import start_mcp
from tests.mcp.messages import INIT

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(request_id: int, tool: str, arguments: dict[str, Any]) -> bytes:
    """One ``tools/call`` request as a line."""
    params = {"name": tool, "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode() + b"\n"


def started(tmp_path: Path, user: str, **settings: str) -> tuple[subprocess.Popen[bytes], Path]:
    """The server, initialized (its answer to ``initialize`` read), stdin left open."""
    process, log = start_mcp(tmp_path, user, **settings)
    assert process.stdin is not None
    process.stdin.write(json.dumps(INIT).encode() + b"\n")
    process.stdin.flush()
    first = read_answers(process, until_id=1, timeout_s=90)
    assert [a.get("id") for a in first] == [1], first or log.read_text(errors="replace")
    process.stdin.write(json.dumps(INITIALIZED).encode() + b"\n")
    process.stdin.flush()
    return process, log


def stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the server if it still runs and close its pipes (stdin may be closed)."""
    process.kill()
    process.wait(timeout=30)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with suppress(OSError):
                pipe.close()


def read_answers(
    process: subprocess.Popen[bytes], until_id: int | None, timeout_s: float
) -> list[dict[str, Any]]:
    """The JSON lines the server writes to stdout, up to the answer with ``until_id``
    (None: until stdout closes)."""
    assert process.stdout is not None
    answers: list[dict[str, Any]] = []
    pending = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=0.5):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break  # the server exited
            pending += chunk
            *complete, pending = pending.split(b"\n")
            answers += [json.loads(line) for line in complete if line.strip()]
            if until_id is not None and any(a.get("id") == until_id for a in answers):
                break
    return answers


def stored_memory(db: Database, user: str) -> str:
    """MEMORY.md as PostgreSQL holds it ("" when never written)."""
    with db.engine.connect() as conn:
        content = conn.execute(
            text("SELECT content FROM user_memory WHERE user_id = :u AND file_type = :t"),
            {"u": user, "t": FileKind.MEMORY.file_type},
        ).scalar_one_or_none()
    return content or ""


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set size (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


def rss_kib(pid: int) -> int:
    """The process's resident set size now (VmRSS), in KiB."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1])
