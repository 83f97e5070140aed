"""The URL a PostgreSQL client program (``psql``, ``pg_dump``, ``pg_restore``) connects
with: ``MEMSTRATA_DATABASE_URL`` in libpq's form, or the embedded server's Unix socket as
its ``postmaster.pid`` names it (``memstrata db url``; docs/DEPLOY.md, "Backup and
restore").

Nothing here starts the embedded server: it stops when the last memstrata process of its
data directory exits, so one started for the command would be gone before the URL it
printed was used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import make_url

from memstrata.db.embedded import DATABASE_NAME, pid_alive

# The embedded server's superuser, trusted on its socket (the wheel's initdb).
EMBEDDED_USER = "postgres"


# Query parameters libpq reads a secret from: a URL may carry its password there
# (``?password=…``) rather than after the user name.
SECRET_PARAMETERS = ("password", "sslpassword")


def libpq_url(url: str, *, show_password: bool = False) -> str:
    """``url`` (SQLAlchemy's, ``postgresql+psycopg://``) as libpq reads it
    (``postgresql://``), its password — and a ``password`` or ``sslpassword`` query
    parameter — shown as ``***`` unless ``show_password``."""
    parsed = make_url(url).set(drivername="postgresql")
    if show_password:
        return parsed.render_as_string(hide_password=False)
    hidden = {k: "***" for k in SECRET_PARAMETERS if k in parsed.query}
    shown = parsed.update_query_dict(hidden).render_as_string(hide_password=True)
    return shown.replace("=%2A%2A%2A", "=***")  # as the password is shown: readable


@dataclass(frozen=True)
class Postmaster:
    """What ``postmaster.pid`` says of a server: its process, port and socket directory."""

    pid: int
    port: int
    socket_dir: Path

    def url(self, database: str = DATABASE_NAME) -> str:
        """libpq's URL of ``database`` on this server's socket, as the embedded superuser."""
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://{EMBEDDED_USER}@/{database}?host={host}&port={self.port}"


def read_postmaster(text: str) -> Postmaster | None:
    """``postmaster.pid``'s pid (line 1), port (line 4) and first socket directory (line
    5); None while the server is still writing it or listens on no socket."""
    lines = text.splitlines()
    if len(lines) < 5 or not lines[4].strip():
        return None
    try:
        return Postmaster(int(lines[0]), int(lines[3]), Path(lines[4].strip()))
    except ValueError:
        return None


def running_postmaster(pgdata: Path) -> Postmaster | None:
    """The server running in ``pgdata``, or None: no ``postmaster.pid`` (stopped), or one
    a killed server left behind (its process gone, or its socket). ``OSError`` when the
    file cannot be read (``pgdata`` is its OS user's, mode 700)."""
    try:
        text = (pgdata / "postmaster.pid").read_text()
    except FileNotFoundError:
        return None
    found = read_postmaster(text)
    if found is None or not pid_alive(found.pid):
        return None
    if not (found.socket_dir / f".s.PGSQL.{found.port}").exists():
        return None
    return found


def has_cluster(pgdata: Path) -> bool:
    """Whether ``pgdata`` holds a database cluster (what the wheel tests before initdb)."""
    return (pgdata / "PG_VERSION").exists()
