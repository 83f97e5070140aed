"""A test's ``memstrata serve`` in its own process, its stderr in a log file: started on a
free port, awaited until ready, stopped when the test ends, however it ends."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.log_lines import events_in


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str
    log: Path  # the server's stderr

    def events(self, name: str) -> list[dict[str, Any]]:
        """The JSON log lines of event ``name`` the server wrote to stderr."""
        return events_in(self.log, name)

    def stderr(self) -> str:
        """The end of the server's stderr, for a failure message."""
        return "\n--- serve stderr ---\n" + self.log.read_text(errors="replace")[-4000:]


@contextmanager
def serve_logged(env: Mapping[str, str], log: Path, *, timeout_s: float = 60) -> Iterator[Served]:
    """``memstrata serve`` with exactly ``env`` as its environment, writing its stderr to
    ``log``; yields once ``/readyz`` answers, and stops it after (SIGTERM, then SIGKILL)
    unless it has exited by then (a test that sent SIGTERM itself)."""
    port = free_port()
    with log.open("wb") as stderr:  # a file: a full stderr pipe would stall the server
        process = start_serve(env, port, stderr=stderr)
    served = Served(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_ready(process, served.url, timeout_s=timeout_s, output=served.stderr)
        yield served
    finally:
        stop_serve(process)
