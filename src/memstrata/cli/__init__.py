"""The ``memstrata`` command line. Each module registers its commands on ``app``."""

from __future__ import annotations

import os

# Before anything imports numpy: one BLAS thread in memstrata's own processes. A search's
# one matrix-vector product (10k rows × 384) takes ~0.2 ms on one thread; with OpenBLAS's
# default of a thread per core, the extra thread busy-waits for its next task after every
# search: ~25 ms of a core per search, taken on a 2-core host from the embedding server and
# PostgreSQL (docs/BENCHMARKS.md, "BLAS threads"). An operator's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import signal
import sys
from types import FrameType
from typing import NoReturn

import typer

from memstrata.cli.app import app, print_error
from memstrata.cli.help_format import bare_flags


def build_app() -> typer.Typer:
    """The app with every command registered (tests drive this through Typer's runner)."""
    _register()
    bare_flags(app)
    return app


def main() -> None:
    # A supervisor's SIGTERM unwinds like Ctrl-C, so every command's context managers still
    # stop the embedded PostgreSQL and the local embedding servers it started; Python's
    # default action would end the process at once and leave those running (``serve``
    # installs its own handler for uvicorn's shutdown).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    _refuse_undecodable_arguments(sys.argv[1:])
    build_app()()


def _refuse_undecodable_arguments(arguments: list[str]) -> None:
    """Python hands an argument's bytes that are not UTF-8 (a Latin-1 terminal) over as
    lone surrogates U+DC80–U+DCFF; say which byte, not what Python made of it."""
    for number, argument in enumerate(arguments, 1):
        bad = next((c for c in argument if "\udc80" <= c <= "\udcff"), None)
        if bad is not None:
            print_error(
                f"argument {number} has the byte 0x{ord(bad) - 0xDC00:02X}, which is not UTF-8: "
                "set the terminal to UTF-8 (e.g. LANG=C.UTF-8) and type it again"
            )
            raise SystemExit(2)  # a usage error, as Click's


def _exit_on_signal(signum: int, _frame: FrameType | None) -> NoReturn:
    # A second SIGTERM (supervisors repeat theirs) must not cut the clean-up this one
    # starts short and leave PostgreSQL running; SIGKILL stays the hard stop.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)  # the shell's status for "ended by this signal"


def _register() -> None:
    # Imported for their side effect of adding commands; kept out of module import time so
    # that importing memstrata.cli stays cheap.
    from memstrata.cli import conflicts, db, user  # noqa: F401

    for optional in ("serve", "search", "bench", "mcp"):
        try:
            __import__(f"memstrata.cli.{optional}")
        except ModuleNotFoundError as exc:
            if exc.name != f"memstrata.cli.{optional}":
                raise


__all__ = ["app", "build_app", "main"]
