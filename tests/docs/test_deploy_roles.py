"""docs/DEPLOY.md's PostgreSQL set-up with an owner and a replicas' role (section 1), its
backup role and dump (section 8) and its restore onto a new server ("Onto a new server"),
run as written with the wheel's psql, pg_dump, pg_dumpall and pg_restore and the
`memstrata db` commands: the session's server stands for `db` and `old-db`, a second
embedded server holding none of the roles for `new-db`. The roles and the database get a
suffix of their own, so nothing else on the session's server is touched."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from memstrata.db.embedded import EmbeddedPostgres
from tests.db.read_only import BIN as PGBIN
from tests.docs.served import BIN, blocks

pytestmark = pytest.mark.timeout(300)

ROW = "likes oolong tea"
# postgresql://ROLE[:…]@HOST:5432/DATABASE, as the blocks write a server's URL
URL = re.compile(r"postgresql://(?P<role>\w+)(?::…)?@(?P<host>[\w-]+):5432/(?P<db>\w+)")


class Deployment:
    """The names one run uses, and how the docs' blocks are run with them."""

    def __init__(self, servers: dict[str, str], cwd: Path) -> None:
        suffix = secrets.token_hex(3)
        self.owner, self.app, self.backup = (f"ms_{r}_{suffix}" for r in ("owner", "app", "backup"))
        self.database = f"memstrata_{suffix}"
        self.servers = servers  # the docs' host name -> the socket directory of its server
        self.cwd = cwd
        # The passwords the blocks take from the environment (the sockets trust anyone).
        self.passwords = {
            "OWNER_PW": "owner pw/@:%",
            "APP_PW": secrets.token_hex(8),
            "BACKUP_PW": secrets.token_hex(8),
        }

    def adapt(self, block: str, **hosts: str) -> str:
        """``block`` with this run's names, its URLs on the servers' sockets (``hosts``
        maps a host name of the block to another one of ``servers``)."""
        block = textwrap.dedent(block)  # blocks inside a list item are indented
        block = re.sub(r"\bms_(owner|app|backup)\b", lambda m: getattr(self, m[1]), block)
        for given in ("DATABASE memstrata ", "\\connect memstrata\n"):
            block = block.replace(given, given.replace("memstrata", self.database))

        def on_socket(m: re.Match[str]) -> str:
            database = "postgres" if m["db"] == "postgres" else self.database
            return self.url(m["role"], self.servers[hosts.get(m["host"], m["host"])], database)

        return URL.sub(on_socket, block)

    def url(self, role: str, socket: str, database: str | None = None) -> str:
        return f"postgresql://{role}@/{database or self.database}?host={socket}"

    def sh(self, block: str, **hosts: str) -> subprocess.CompletedProcess[str]:
        return self.run(["bash", "-euo", "pipefail", "-c", self.adapt(block, **hosts)])

    def memstrata(self, url: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([str(BIN / "memstrata"), *args], MEMSTRATA_DATABASE_URL=url)

    def run(self, command: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
        env |= {
            "PATH": f"{PGBIN}:{BIN}:{env['PATH']}",  # the blocks' bare psql, pg_dump, …
            "MEMSTRATA_ENVIRONMENT": "production",
            "MEMSTRATA_DATA_DIR": str(self.cwd / "data"),
            **self.passwords,
            **extra,
        }
        return subprocess.run(
            command, cwd=self.cwd, env=env, capture_output=True, text=True, timeout=120
        )

    def sql(self, url: str, statement: str) -> list[tuple[object, ...]]:
        engine = create_engine(
            url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
        )
        try:
            with engine.connect() as conn:
                result = conn.execute(text(statement))
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()


def _socket(url: str) -> str:
    return str(make_url(url).query["host"])


def _block(containing: str) -> str:
    (found,) = blocks("docs/DEPLOY.md", "sh", containing)
    return found


@pytest.fixture
def deployment(
    pg_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    new = EmbeddedPostgres(tmp_path_factory.mktemp("n"), database="postgres")  # a short path
    old = _socket(pg_url)
    run = Deployment({"db": old, "old-db": old, "new-db": _socket(new.start())}, tmp_path)
    try:
        yield run
    finally:
        new.stop()
        admin = run.url("postgres", old, "postgres")
        run.sql(admin, f"DROP DATABASE IF EXISTS {run.database} WITH (FORCE)")
        for role in (run.owner, run.app, run.backup):
            run.sql(admin, f"DROP ROLE IF EXISTS {role}")


def test_two_roles_a_backup_role_and_a_restore_onto_a_new_server_as_written(
    deployment: Deployment,
) -> None:
    run = deployment
    old, new = run.servers["db"], run.servers["new-db"]
    owner, app = run.url(run.owner, old), run.url(run.app, old)

    # Section 1: the superuser's step, the owner's migration, the grants.
    done = run.sh(_block("CREATE ROLE ms_owner"))
    assert done.returncode == 0, done.stderr
    done = run.memstrata(owner, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    refused = run.memstrata(f"{app}&application_name=replica-a", "db", "status")
    assert refused.returncode == 1 and "cannot write memstrata's tables" in refused.stderr
    grants = _block("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ms_app")
    done = run.sh(grants)
    assert done.returncode == 0, done.stderr
    done = run.memstrata(f"{app}&application_name=replica-a", "db", "status")
    assert done.returncode == 0, done.stderr
    run.sql(
        app,
        f"INSERT INTO user_memory (user_id, file_type, content) VALUES ('a', 'user_md', '{ROW}')",
    )

    # Section 8: the replicas' role cannot dump; the backup role can.
    failed = run.run(["pg_dump", "-Fc", "-d", app, "-f", "app.dump"])
    assert failed.returncode == 1
    assert 'failed to get data for sequence "memory_embeddings_id_seq"' in failed.stderr
    done = run.sh(_block("CREATE ROLE ms_backup"))
    assert done.returncode == 0, done.stderr
    done = run.sh(_block("memstrata.dump.part"))
    assert done.returncode == 0, done.stderr
    assert (run.cwd / "memstrata.dump").stat().st_size > 0
    assert not (run.cwd / "memstrata.dump.part").exists()

    # Onto a new server without the replicas' roles: pg_restore stops at the grants, and
    # `db status` as the owner says nothing of them.
    super_new = run.url("postgres", new, "postgres")
    for statement in (
        f"CREATE ROLE {run.owner} LOGIN",
        f"CREATE DATABASE {run.database} OWNER {run.owner}",
    ):
        run.sql(super_new, statement)
    run.sql(run.url("postgres", new), "CREATE EXTENSION vector")
    stopped = run.run(
        [
            "pg_restore",
            "-d",
            run.url(run.owner, new),
            "--no-comments",
            "--exit-on-error",
            "memstrata.dump",
        ]
    )
    assert stopped.returncode == 1
    assert f'role "{run.app}" does not exist' in stopped.stderr
    done = run.memstrata(run.url(run.owner, new), "db", "status")
    assert done.returncode == 0, done.stderr
    run.sql(super_new, f"DROP DATABASE {run.database} WITH (FORCE)")
    run.sql(super_new, f"DROP ROLE {run.owner}")

    # The roles first, as written: the replicas' role may write there at once.
    restore = _block("pg_dumpall")
    done = run.sh(restore)
    assert done.returncode == 0, done.stderr
    assert 'role "postgres" already exists' in done.stderr  # the one error the docs expect
    done = run.memstrata(run.url(run.app, new), "db", "status")
    assert done.returncode == 0, done.stderr
    assert run.sql(run.url(run.app, new), "SELECT content FROM user_memory") == [(ROW,)]

    # Or without the grants (`--no-acl`), then section 1's grants again.
    run.sql(super_new, f"DROP DATABASE {run.database} WITH (FORCE)")
    create = "\n".join(line for line in restore.splitlines() if "roles.sql" not in line)
    done = run.sh(create.replace("--exit-on-error", "--no-acl --exit-on-error"))
    assert done.returncode == 0, done.stderr
    assert run.sql(run.url(run.owner, new), "SELECT count(*) FROM pg_default_acl") == [(0,)]
    refused = run.memstrata(run.url(run.app, new), "db", "status")
    assert refused.returncode == 1 and "cannot write memstrata's tables" in refused.stderr
    done = run.sh(grants, db="new-db")
    assert done.returncode == 0, done.stderr
    done = run.memstrata(run.url(run.app, new), "db", "status")
    assert done.returncode == 0, done.stderr
