"""The storage part of ``Settings``: the deployment and where memory lives (the database,
the sandboxes, the templates), how a blank path or URL reads, and the production check on
the database URL. ``memstrata.config.Settings`` inherits it; import from there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from memstrata.config_bounds import (
    MAX_CONTENT_BYTES_LIMIT,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    TIMEOUT_WHY,
)
from memstrata.config_secrets import ConcealedUrl, SecretUrl
from memstrata.memory.kinds import MAX_CONTENT_BYTES

# MEMSTRATA_DATABASE_URL's value for the embedded server, chosen on purpose (production
# refuses an unset URL: an empty or misspelled variable must not give each replica a
# database of its own).
EMBEDDED_DATABASE = "embedded"
# What a database URL looks like, for the message that refuses another.
DATABASE_URL_EXAMPLE = "e.g. postgresql://user:password@host:5432/memstrata, or 'embedded'"
# The URLs people paste from hosting dashboards; we always drive psycopg 3.
DATABASE_URL_ALIASES = ("postgres://", "postgresql://", "postgresql+psycopg2://")
PSYCOPG_SCHEME = "postgresql+psycopg://"
# How often the database monitor of `memstrata serve` checks the database (seconds).
DB_CHECK_INTERVAL_S = 1.0
# A memory-file write based on an older version whose text the file holds already:
# "conflict" is the spec's 409 (a stale version is a conflict); "unchanged" answers it
# with the stored version, nothing written (``memory.same_text.unchanged_write``).
SameTextStaleVersion = Literal["conflict", "unchanged"]
SAME_TEXT_STALE_VERSION: SameTextStaleVersion = "conflict"


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("memstrata", appauthor=False))


def is_blank(value: object) -> bool:
    """An environment value that says nothing: empty, or white space only."""
    return isinstance(value, str) and not value.strip()


class StorageSettings(BaseModel):
    """The deployment and where memory lives: the database, the sandboxes, the templates,
    the largest file (the first part of ``Settings``)."""

    environment: Literal["development", "production", "test"] = Field(
        default="development",
        description="development generates a local JWT secret; production refuses to open "
        "a database without MEMSTRATA_DATABASE_URL (every command but `memstrata token` and "
        "`memstrata conflicts`, which open none), and `memstrata serve` / `memstrata token` "
        "refuse without an explicit secret (32 characters or more) or public key (`memstrata "
        "db`, `memstrata mcp` over stdio and the library authenticate nobody and need "
        "neither). test (what memstrata's own test suite runs under) is in between: "
        "production's rule for tokens without its 32-character minimum (MEMSTRATA_JWT_SECRET "
        "or MEMSTRATA_JWT_PUBLIC_KEY is required, no secret is generated) and development's "
        "for the database (unset MEMSTRATA_DATABASE_URL: the embedded server).",
    )
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Where the embedded PostgreSQL data, the dev JWT secret and the default "
        "sandboxes live (empty counts as unset).",
    )
    database_url: SecretUrl | None = Field(
        default=None,
        description="External PostgreSQL (with pgvector). Unset or `embedded`: start the "
        "embedded server in <data_dir>/pgdata (production refuses an unset URL; `embedded` "
        "chooses the embedded server there, for one machine only). Connections use "
        "`connect_timeout=10` and TCP keepalives (idle 30 s, interval 10 s, count 3) unless "
        "the URL's query string sets them (libpq names); "
        "failed statements never log their parameters.",
    )
    db_pool_size: int = Field(
        default=5,
        ge=1,
        le=MAX_THREADS,
        description=f"SQLAlchemy pool size; at most {MAX_THREADS} (past any server's "
        "connection slots: PostgreSQL's default max_connections is 100).",
    )
    db_check_interval_s: float = Field(
        default=DB_CHECK_INTERVAL_S,
        gt=0,
        le=60,
        allow_inf_nan=False,
        description="How often `memstrata serve` checks that the database answers (and, on "
        "the embedded server, restarts it when it does not: five times in a row at most, "
        "each pause one interval longer); at most 60, or a lost database goes unnoticed "
        "that long.",
    )
    migrate_on_start: bool = Field(
        default=True,
        description="Bring the schema to head when a process opens the database. Set false "
        "on replicas: run `memstrata db upgrade` once before a rollout; a replica then "
        "refuses to start on a schema that is not at head.",
    )

    sandbox_root: Path | None = Field(
        default=None,
        description="Root of the per-user sandbox directories (unset or empty: "
        "<data_dir>/sandboxes).",
    )
    sandbox_file_mode: str = Field(
        default="600",
        description="Octal mode of the files the local sandboxes create (directories get the "
        "matching x bits: 600 -> 700). Private by default, as they hold the user's memory; "
        "660 lets a shared group (an agent's account) read and write them, and so every "
        "member of that group every user's sandbox (one group for all users: put only the "
        "agents' account in it). Existing files "
        "and directories keep their mode; the umask still applies.",
    )
    sandbox_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Deadline of one sandbox call (read, write, list, exists, delete), local "
        "directories and a host's SandboxProvider alike. A call still running then is "
        "abandoned: a `sandbox_failed` warning (`sandbox.timeout`), the DB write stands, and "
        "that sandbox fails fast for as long again. 5 s: a remote sandbox's file API answers "
        "well under a second and waking a paused sandbox takes a few, while a frontend edit "
        "with a hung sandbox still answers in about 5 s (per sandbox it mirrors to), inside "
        "HTTP clients' timeouts and MEMSTRATA_SHUTDOWN_GRACE_S (docs/RELIABILITY.md); "
        f"{TIMEOUT_WHY}.",
    )
    template_dir: Path | None = Field(
        default=None,
        description="Directory with SOUL.md, USER.md, MEMORY.md, AGENTS.md templates "
        "(unset or empty: the packaged docs/sandbox_template).",
    )
    max_content_bytes: int = Field(
        default=MAX_CONTENT_BYTES,
        ge=1,
        le=MAX_CONTENT_BYTES_LIMIT,
        description="Largest memory file accepted, in UTF-8 bytes; at most "
        f"{MAX_CONTENT_BYTES_LIMIT} (64 MiB: a file is read whole into every prompt it is "
        "part of, and cut and embedded on each write).",
    )

    same_text_stale_version: SameTextStaleVersion = Field(
        default=SAME_TEXT_STALE_VERSION,
        description="A memory-file write (REST PUT, MCP `memory_write`, the library's "
        "`upsert_memory_file`) based on an older version, of the very text the file holds "
        "now. `conflict`: the spec's 409, whose body adds `same_content: true` and whose "
        "message says the file holds this text already (a retry after a lost answer knows "
        "it landed). `unchanged`: 200 with the stored version and `unchanged: true`, nothing "
        "written, as if the version matched (an opt-in departure from the spec). A write on "
        "the current version of the same text is always 200 `unchanged`.",
    )

    @field_validator("data_dir", "sandbox_root", "template_dir", mode="before")
    @classmethod
    def _blank_path_is_unset(cls, value: object, info: ValidationInfo) -> object:
        """An empty or blank directory (``MEMSTRATA_SANDBOX_ROOT=``, as a templated .env
        leaves it) is the setting's default, as an empty MEMSTRATA_DATABASE_URL is: read as
        a path, it was the working directory of whichever process started, silently."""
        if not is_blank(value) or info.field_name is None:
            return value
        return cls.model_fields[info.field_name].get_default(call_default_factory=True)

    @field_validator("sandbox_file_mode")
    @classmethod
    def _octal_mode(cls, value: str) -> str:
        # A pattern's own refusal showed the regex, not what to write.
        if re.fullmatch(r"0?[0-7]{3}", value) is None:
            raise ValueError(
                "must be an octal mode like 600 or 0660 (three digits 0-7, a leading 0 "
                f"allowed); got {value[:20]!r}"
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _normalise_url(cls, value: str | None) -> str | None:
        url = normalise_database_url(value)
        return None if url is None else ConcealedUrl(url)  # after SecretUrl's own validator

    @property
    def external_database_url(self) -> str | None:
        """The PostgreSQL URL to connect to; None: the embedded server."""
        return None if self.database_url == EMBEDDED_DATABASE else self.database_url

    @property
    def resolved_sandbox_root(self) -> Path:
        return self.sandbox_root or self.data_dir / "sandboxes"


def normalise_database_url(value: str | None) -> str | None:
    """None for an unset or blank URL, ``embedded`` for the embedded server, else a
    psycopg 3 URL (``postgresql+psycopg://``) SQLAlchemy can read."""
    if value is None or is_blank(value):
        return None
    if value.strip().lower() == EMBEDDED_DATABASE:
        return EMBEDDED_DATABASE
    for prefix in DATABASE_URL_ALIASES:
        if value.startswith(prefix):
            value = PSYCOPG_SCHEME + value[len(prefix) :]
            break
    return _postgresql_url(value)


def _postgresql_url(value: str) -> str:
    """``value`` if it is a PostgreSQL URL SQLAlchemy can read; else a ValueError saying
    what one looks like (another scheme, or a port that is not a number, used to end
    every command in a driver's traceback)."""
    if "://" not in value:  # the value is not quoted: it may be a password pasted alone
        raise ValueError(f"is not a URL (it has no scheme://); {DATABASE_URL_EXAMPLE}")
    if not value.startswith(PSYCOPG_SCHEME):
        scheme = value.split("://", 1)[0]
        raise ValueError(
            f"must be a PostgreSQL URL ({DATABASE_URL_EXAMPLE}); got scheme {scheme[:20]!r}"
        )
    # Here, not at the top: every Settings() would load SQLAlchemy, `memstrata token` too.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(value).port  # noqa: B018  (the port is parsed on access)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"is not a valid PostgreSQL URL ({exc}); {DATABASE_URL_EXAMPLE}") from None
    return value


def unset_database_problem(settings: StorageSettings) -> str | None:
    """Why ``settings`` may not open a database, or None: production with no URL (an empty
    or misspelled variable must not give each replica a database of its own).

    Checked where a database is opened (``Database.open``, and every CLI command but
    ``memstrata token`` and ``memstrata conflicts`` before it starts anything), not when
    settings are read: signing a token opens none, nor does reading a sandbox. The JWT
    settings are likewise checked where tokens are verified or signed
    (``memstrata.api.token_keys.require_token_keys``)."""
    if settings.environment != "production" or settings.database_url is not None:
        return None
    return (
        "MEMSTRATA_ENVIRONMENT=production needs MEMSTRATA_DATABASE_URL: the PostgreSQL URL "
        "every replica shares, or `embedded` for the embedded server in MEMSTRATA_DATA_DIR "
        "(one machine only)"
    )
