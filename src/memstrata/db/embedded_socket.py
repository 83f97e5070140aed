"""Where the embedded server's socket may go: inside its data directory, nowhere else.

The server trusts every local connection (the wheel's ``initdb --auth-local=trust``), so
its Unix socket is its only guard: in ``pgdata`` (mode 0700) only its own OS user reaches
it. When ``pgdata/.s.PGSQL.5432`` is longer than a socket address may be (107 bytes on
Linux, 103 on macOS), the wheel quietly puts the socket in a directory under the runtime
directory instead, which other local users can traverse — and then any of them connects
as the superuser, with no password. So a data directory too long for its socket is
refused at start-up, before the wheel runs.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from memstrata.errors import DatabaseSetupError

# PostgreSQL's socket file for its default port (the wheel never changes it).
SOCKET_NAME = ".s.PGSQL.5432"


def socket_fits(path: Path) -> bool:
    """Whether ``path`` is short enough for a Unix socket address here: Python refuses a
    longer one before any system call, whether its directory exists or not."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(str(path))
    except OSError as exc:
        if "too long" in str(exc):
            return False
        if exc.errno in (errno.ENOENT, errno.EADDRINUSE, errno.EACCES, errno.ENOTDIR):
            return True  # the name was accepted; the directory or file is the matter
        raise
    else:
        path.unlink(missing_ok=True)
        return True
    finally:
        probe.close()


def check_socket_path(pgdata: Path) -> None:
    """Refuse a ``pgdata`` whose socket would not fit inside it (module doc)."""
    path = pgdata / SOCKET_NAME
    if socket_fits(path):
        return
    size = len(str(path).encode())
    raise DatabaseSetupError(
        f"the embedded PostgreSQL cannot keep its socket in {pgdata}: {path} is {size} bytes, "
        "longer than a socket address may be, and a socket anywhere else would let other "
        "local users in as the database superuser without a password. Set "
        "MEMSTRATA_DATA_DIR to a shorter path (a socket address holds 107 bytes on Linux, "
        "103 on macOS), or MEMSTRATA_DATABASE_URL to a PostgreSQL server"
    )
