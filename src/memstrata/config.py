"""Settings: every knob, read from ``MEMSTRATA_*`` environment variables (or a ``.env`` file).

Nothing here is instantiated at import time; each entry point (CLI, app factory, tests)
builds one ``Settings`` and passes it down.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

# The embedding part lives in a module of its own (each reads in one sitting); its public
# names are imported from here, as they always were.
from memstrata.config_embedding import STORED_VECTOR_DIM as STORED_VECTOR_DIM
from memstrata.config_embedding import EmbeddingModelSpec as EmbeddingModelSpec
from memstrata.config_embedding import EmbeddingSettings
from memstrata.config_lists import LIST_EXAMPLES, must_be_list
from memstrata.errors import UnknownSettingError
from memstrata.memory.kinds import MAX_CONTENT_BYTES
from memstrata.retrieval.chunk import CHUNK_TOKENS, CONTEXT_TOKENS, MemoryChunking
from memstrata.retrieval.fusion import HALF_LIFE_DAYS, RRF_K, Fusion

# Share of the model's context the memory part of the system prompt may take (spec: 15 %).
PROMPT_BUDGET_RATIO = 0.15
# Candidates per side: this × top_k (spec: 3) ...
CANDIDATE_MULTIPLIER = 3
# ... and never fewer than this, whatever top_k (docs/BENCHMARKS.md).
MIN_CANDIDATES = 50
# The same while time decay is on: a deeper pool lets decay promote recent rows that
# matched poorly, so a shallower one ranks better there (docs/BENCHMARKS.md).
MIN_CANDIDATES_DECAY = 30
# Query embeddings held by the search's LRU (384-d: ~3.5 KiB each, text and key included;
# bounded in bytes too, by a share of the search cache's budget: retrieval.cache).
QUERY_CACHE_ENTRIES = 1024
# Users whose search index one process holds at most. A backstop: the byte budget binds
# first for any user with a vector row (the smallest such index is charged ~104 KiB at
# 384-d, so 512 MiB holds ~4,900), and 8,192 binds before it only while the average held
# user is charged under 64 KiB — users with no vector row, reloaded in milliseconds, at
# ~2 KiB of RSS when empty (docs/SCALING.md).
SEARCH_CACHE_USERS = 8192
# A user's search index is snapshotted once this many of its conversation rows are not in
# a stored snapshot (retrieval.snapshot; below it a cold load is already fast).
INDEX_SNAPSHOT_MIN_ROWS = 1000


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("memstrata", appauthor=False))


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# MEMSTRATA_DATABASE_URL's value for the embedded server, chosen on purpose (production
# refuses an unset URL: an empty or misspelled variable must not give each replica a
# database of its own).
EMBEDDED_DATABASE = "embedded"
# MEMSTRATA_* variables that are no setting but are read on purpose (``make bench``).
TOOLING_VARIABLES = frozenset({"MEMSTRATA_LOCOMO"})


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
        "neither).",
    )
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Where the embedded PostgreSQL data, the dev JWT secret and the default "
        "sandboxes live (empty counts as unset).",
    )
    database_url: str | None = Field(
        default=None,
        description="External PostgreSQL (with pgvector). Unset or `embedded`: start the "
        "embedded server in <data_dir>/pgdata (production refuses an unset URL; `embedded` "
        "chooses the embedded server there, for one machine only). Connections use "
        "`connect_timeout=10` and TCP keepalives (idle 30 s, interval 10 s, count 3) unless "
        "the URL's query string sets them (libpq names); "
        "failed statements never log their parameters.",
    )
    db_pool_size: int = Field(default=5, ge=1, description="SQLAlchemy pool size.")
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
        pattern=r"^0?[0-7]{3}$",
        description="Octal mode of the files the local sandboxes create (directories get the "
        "matching x bits: 600 -> 700). Private by default, as they hold the user's memory; "
        "660 lets a shared group (an agent's account) read and write them. Existing files "
        "and directories keep their mode; the umask still applies.",
    )
    sandbox_timeout_s: float = Field(
        default=5.0,
        gt=0,
        allow_inf_nan=False,
        description="Deadline of one sandbox call (read, write, list, exists, delete), local "
        "directories and a host's SandboxProvider alike. A call still running then is "
        "abandoned: a `sandbox_failed` warning (`sandbox.timeout`), the DB write stands, and "
        "that sandbox fails fast for as long again. 5 s: a remote sandbox's file API answers "
        "well under a second and waking a paused sandbox takes a few, while a frontend edit "
        "with a hung sandbox still answers in about 5 s (per sandbox it mirrors to), inside "
        "HTTP clients' timeouts and MEMSTRATA_SHUTDOWN_GRACE_S (docs/RELIABILITY.md).",
    )
    template_dir: Path | None = Field(
        default=None,
        description="Directory with SOUL.md, USER.md, MEMORY.md, AGENTS.md templates "
        "(unset or empty: the packaged docs/sandbox_template).",
    )
    max_content_bytes: int = Field(
        default=MAX_CONTENT_BYTES, ge=1, description="Largest memory file accepted, in UTF-8 bytes."
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


def is_blank(value: object) -> bool:
    """An environment value that says nothing: empty, or white space only."""
    return isinstance(value, str) and not value.strip()


def _postgresql_url(value: str) -> str:
    """``value`` if it is a PostgreSQL URL SQLAlchemy can read; else a ValueError saying
    what one looks like (another scheme, or a port that is not a number, used to end
    every command in a driver's traceback)."""
    example = "e.g. postgresql://user:password@host:5432/memstrata, or 'embedded'"
    if not value.startswith("postgresql+psycopg://"):
        scheme = value.split("://", 1)[0] if "://" in value else "none"
        raise ValueError(f"must be a PostgreSQL URL ({example}); got scheme {scheme[:20]!r}")
    try:
        make_url(value).port  # noqa: B018  (the port is parsed on access)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"is not a valid PostgreSQL URL ({exc}); {example}") from None
    return value


class Settings(EmbeddingSettings, StorageSettings, BaseSettings):
    """memstrata configuration. Environment variables are ``MEMSTRATA_<FIELD>``.

    The fields come in three parts: ``StorageSettings``'s, ``EmbeddingSettings``'s, then
    the search, security and serving ones below. Pydantic puts the last-listed base's
    fields first, so the bases are listed in reverse to keep that order, which
    docs/CONFIGURATION.md follows.
    """

    # extra="ignore" is for the environment and the .env file, which may hold other
    # programs' variables (unknown MEMSTRATA_* ones are a warning: unknown_variables);
    # keyword arguments that name no setting are refused (settings_customise_sources).
    model_config = SettingsConfigDict(
        env_prefix="MEMSTRATA_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' own sources in its own order, once the keyword arguments are
        known to name settings (``UnknownSettingError`` naming the closest one): a
        misspelt ``Settings(prompt_budget_raito=0.2)`` was silently dropped. Checked here,
        not in a validator: a validator gets them merged with the .env file's extras."""
        if isinstance(init_settings, InitSettingsSource):
            check_setting_names(init_settings.init_kwargs, settings_cls.model_fields)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    chunk_tokens: int = Field(
        default=CHUNK_TOKENS, ge=16, description="Chunk size in tokens (spec: 512)."
    )
    memory_chunking: MemoryChunking = Field(
        default="paragraphs",
        description="How USER.md and MEMORY.md are cut into chunks: `paragraphs`, the "
        "spec's (split on blank lines, small paragraphs merged up to chunk_tokens), or "
        "`entries`, an opt-in departure from the spec: one chunk per entry (a top-level "
        "list item or a paragraph, a heading kept with the entry after it). On a "
        "long-lived user's MEMORY.md of 312 dated entries, recall@5 of its facts "
        "(memory files only) is 0.92 with paragraphs and 1.00 with entries, and a write "
        "of that file costs about the same CPU either way (p50 24 against 21 ms): an "
        "entry inserted mid-file moves every later entry's row, written again with the "
        "vector it has (docs/BENCHMARKS.md, 'A long-lived user's MEMORY.md'). A file "
        "is cut anew at its next write, or at once by `memstrata reindex --user USER`.",
    )
    conversation_context_tokens: int = Field(
        default=CONTEXT_TOKENS,
        ge=0,
        description="Tokens of the previous round prefixed to each indexed round as context "
        "(0 = off); see retrieval/rounds.py.",
    )
    rrf_k: int = Field(default=RRF_K, ge=1, description="RRF constant (spec: 60).")
    candidate_multiplier: int = Field(
        default=CANDIDATE_MULTIPLIER,
        ge=1,
        description="Candidates per side = multiplier × top_k (spec: 3).",
    )
    min_candidates: int = Field(
        default=MIN_CANDIDATES,
        ge=1,
        description="Candidates per side are max(multiplier × top_k, this) while time decay "
        "is off (MEMSTRATA_DECAY=false), so the first results do not change with top_k "
        "(chosen by measurement, docs/BENCHMARKS.md).",
    )
    min_candidates_decay: int = Field(
        default=MIN_CANDIDATES_DECAY,
        ge=1,
        description="min_candidates while time decay is on: a deeper pool lets decay lift "
        "recent rows that matched poorly (chosen by measurement, docs/BENCHMARKS.md).",
    )
    query_cache_entries: int = Field(
        default=QUERY_CACHE_ENTRIES,
        ge=0,
        description="Query embeddings kept in an LRU keyed by user + model + text (0 = off).",
    )
    decay: bool = Field(
        default=True,
        description="Time decay of conversation rows (the spec's; on by default). Off, "
        "recency does not change scores (min_candidates applies instead of "
        "min_candidates_decay): on LoCoMo's full dev set hybrid recall@10 is 0.700 off "
        "against 0.310 with the spec's 30-day decay, whose questions ask about turns weeks "
        "to months old; decay_floor 0.9 keeps 0.700 with recency still counting "
        "(docs/BENCHMARKS.md).",
    )
    decay_half_life_days: float = Field(
        default=HALF_LIFE_DAYS, gt=0, description="Time-decay half-life in days (spec: 30)."
    )
    decay_floor: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="score × (floor + (1 − floor) × 0.5^(age/half_life)); 0 is the spec.",
    )
    search_cache_users: int = Field(
        default=SEARCH_CACHE_USERS,
        ge=1,
        description="Users whose search index is kept in memory (LRU), a backstop to "
        "MEMSTRATA_SEARCH_CACHE_BYTES, which binds first for users with vectors; see "
        "docs/SCALING.md.",
    )
    index_snapshot_min_rows: int = Field(
        default=INDEX_SNAPSHOT_MIN_ROWS,
        ge=0,
        description="Store a user's conversation rows as one binary search-index snapshot "
        "once this many are not in the stored one, so the next cold load reads one value "
        "instead of every row (0 = off: neither read nor write snapshots, no warming). "
        "docs/ARCHITECTURE.md.",
    )
    index_warm_after_import: bool = Field(
        default=True,
        description="After a batch import that leaves MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS or more "
        "conversation rows outside the user's snapshot, load that user's index in the "
        "background so the first search is a warm one (docs/ARCHITECTURE.md, 'Warming "
        "after an import'; its cost to other users' searches in docs/BENCHMARKS.md).",
    )
    search_cache_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024 * 1024,
        description="Byte budget of the per-process search caches: the per-user indexes, "
        "charged at the resident memory (RSS) measured for them, least recently searched "
        "users evicted above it; 1/64 of it bounds the query-embedding cache. See "
        "docs/SCALING.md for the measured bytes per 1,000 rows.",
    )
    vector_backend: Literal["memory", "pgvector"] = Field(
        default="memory",
        description="Where vector candidates come from: the per-user in-memory index (exact "
        "cosine over vectors loaded from pgvector) or a pgvector query per search.",
    )
    search_fusion: Fusion = Field(
        default="rrf",
        description="How the BM25 and vector candidates are combined: `rrf`, the spec's "
        "reciprocal rank fusion (k = MEMSTRATA_RRF_K), or `convex`, an opt-in departure "
        "from the spec: 0.5 × min-max(BM25) + 0.5 × min-max(cosine) over the same "
        "candidates (RRF still when a side gives ranks only). Convex ranked better on "
        "LoCoMo and MADial; its first results move with top_k above 10 (docs/BENCHMARKS.md, "
        "'Score fusion (opt-in)').",
    )
    prompt_budget_ratio: float = Field(
        default=PROMPT_BUDGET_RATIO,
        gt=0,
        le=1,
        description="Share of token_limit for memory (spec: 15%).",
    )

    jwt_secret: str | None = Field(default=None, description="HS256 secret for bearer tokens.")
    jwt_public_key: str | None = Field(
        default=None, description="PEM public key for RS256/ES256 tokens (instead of a secret)."
    )
    jwt_rotation_secrets: list[str] = Field(
        default_factory=list,
        description="More HS secrets accepted beside MEMSTRATA_JWT_SECRET while it is rotated "
        "(JSON list): the next one before the token signer switches to it, then the previous "
        "one until its last token has expired (docs/DEPLOY.md, 'Rotating the JWT key'). A "
        "token whose `kid` names one is checked with it, others with each in turn; "
        "`memstrata token` signs with MEMSTRATA_JWT_SECRET.",
    )
    jwt_rotation_public_keys: list[str] = Field(
        default_factory=list,
        description="More public keys (JSON list of PEM texts or paths) accepted beside "
        "MEMSTRATA_JWT_PUBLIC_KEY while the identity provider rotates its key; each verifies "
        "the algorithms of its kind (RS*/PS* an RSA key, ES* an EC key), tried in turn.",
    )
    jwt_algorithms: list[str] = Field(
        default_factory=lambda: ["HS256"], description="Accepted JWT algorithms ('none' never)."
    )
    jwt_user_claim: str = Field(default="sub", description="Claim that carries the user id.")
    jwt_audience: str | None = Field(default=None, description="Required `aud`, if set.")
    jwt_issuer: str | None = Field(
        default=None,
        description="Required `iss`, if set: with an identity provider that signs tokens "
        "for several services with one key, the issuer (and the audience) tell memstrata's "
        "tokens from theirs.",
    )
    jwt_leeway_s: float = Field(
        default=30.0, ge=0, le=600, description="Clock skew allowed on exp/nbf/iat, seconds."
    )
    jwt_max_lifetime_s: float | None = Field(
        default=None,
        gt=0,
        description="Refuse a token whose `exp` is further away than this many seconds "
        "(plus the leeway), whatever its issuer chose: it bounds how long a leaked token "
        "works. Unset: no bound, the issuer decides `exp`.",
    )
    otel_telemetry: bool = Field(
        default=False,
        description="FastAPI's built-in OpenTelemetry spans, metrics and logs for `memstrata "
        "serve` (needs a configured OpenTelemetry provider). Off: looking for a provider on "
        "every request cost 12 % of the event loop; /metrics is memstrata's own.",
    )
    api_docs: bool = Field(
        default=True,
        description="Serve <api_prefix>/docs and /redoc (assets from the installed package, no "
        "CDN); <api_prefix>/openapi.json is served either way.",
    )

    skill_dirs: list[Path] = Field(
        default_factory=list,
        description="Extra skill directories (one folder per skill with a SKILL.md); the "
        "builtin skills are always included.",
    )
    api_prefix: str = Field(default="", description="Prefix when mounted into a host app.")
    web_ui: bool = Field(
        default=True,
        description="Serve the memory settings page at <api_prefix>/ (see docs/WEB.md); "
        "false for hosts with their own frontend.",
    )
    host: str = Field(default="127.0.0.1", description="`memstrata serve` bind address.")
    port: int = Field(
        default=8700, ge=0, le=65535, description="`memstrata serve` port; 0 picks a free one."
    )
    shutdown_grace_s: int = Field(
        default=15,
        ge=0,
        description="On SIGTERM, `memstrata serve` waits this long for requests in flight; "
        "those still running then get a 503 (`shutting_down`, Retry-After), and their work "
        "(a worker thread, a memory-file write under way) gets one passage embedding call's "
        "timeout more (13 s with the default timeouts and batch size) before the runtime "
        "closes; then the embedded PostgreSQL and the local embedding servers stop. Keep "
        "Kubernetes' terminationGracePeriodSeconds at least the preStop hook + this + 13 + "
        "2: with a 5 s preStop, 35 — above the default 30 (docs/DEPLOY.md).",
    )
    max_request_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Largest HTTP request body (413 above)."
    )
    mcp_http_enabled: bool = Field(
        default=True,
        description="`memstrata serve` also answers MCP (streamable HTTP) at <api_prefix>/mcp, "
        "behind the same bearer tokens as /api; see docs/MCP.md.",
    )
    mcp_allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        description="Host header values /mcp accepts (DNS-rebinding protection; 'name:*' "
        "allows any port). Add the public host name when serving beyond loopback.",
    )
    mcp_allowed_origins: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        description="Origin header values /mcp accepts from browsers (no Origin is always "
        "accepted); others get 403.",
    )
    mcp_dns_rebinding_protection: bool = Field(
        default=True,
        description="Check Host and Origin on /mcp against the two lists above (off: any).",
    )
    mcp_max_sessions_per_user: int = Field(
        default=32,
        ge=1,
        description="MCP sessions (/mcp) one user may hold open at once; the next initialize "
        "gets 429 (`too_many_sessions`). A client holds one per connection and ends it with "
        "DELETE, so 32 covers several clients at once (an IDE, a few terminals, parallel "
        "agents) and what crashed ones leave until it idles out, while one user's runaway loop "
        "holds at most 32 of the sessions the process allows (MEMSTRATA_MCP_MAX_SESSIONS).",
    )
    mcp_max_sessions: int = Field(
        default=2000,
        ge=1,
        description="MCP sessions (/mcp) the process holds open at once, all users together "
        "(each costs ~90 KB of memory no cache budget counts). A new session past it ends the "
        "least recently used idle session of any user (its client gets 404 and initializes "
        "again, as the MCP spec says) or, while every session has a request in flight, gets "
        "503 (`too_many_sessions_on_server`) with Retry-After. The MCP SDK's own cap (10 000) "
        "refused every user's new session once reached.",
    )
    mcp_session_idle_timeout_s: float = Field(
        default=1800,
        gt=0,
        allow_inf_nan=False,
        description="An MCP session with no request in flight (an open GET stream counts as "
        "one) ends after this long and frees its slot; its id then answers 404 and the client "
        "initializes again. 1800 is the MCP SDK's own default.",
    )
    mcp_stateless: bool = Field(
        default=False,
        description="Serve /mcp in the MCP SDK's stateless mode: `initialize` opens no "
        "session (no Mcp-Session-Id) and every request stands alone, so any replica behind a "
        "round-robin load balancer answers it. Off (the default), a session lives only in "
        "the process that opened it: its requests must reach that process (affinity on the "
        "Mcp-Session-Id header) or another replica answers 404 `Session not found`. Stateless "
        "has no GET stream and no DELETE, and MEMSTRATA_MCP_MAX_SESSIONS_PER_USER and "
        "MEMSTRATA_MCP_SESSION_IDLE_TIMEOUT_S do not apply (no sessions to count or expire). "
        "Clients on the 2026-07-28 protocol open no session either way. See docs/MCP.md, "
        "'Replicas behind a load balancer'.",
    )
    log_level: str = Field(default="INFO", description="Logging level.")
    log_json: bool = Field(default=True, description="One JSON object per log line.")

    # Before pydantic's own check, whose "Input should be a valid list" showed no example.
    _lists = field_validator(*LIST_EXAMPLES, mode="before")(must_be_list)

    @field_validator("database_url")
    @classmethod
    def _normalise_url(cls, value: str | None) -> str | None:
        if value is None or is_blank(value):
            return None
        if value.strip().lower() == EMBEDDED_DATABASE:
            return EMBEDDED_DATABASE
        # Accept the URLs people paste from hosting dashboards; we always drive psycopg 3.
        for prefix in ("postgres://", "postgresql://", "postgresql+psycopg2://"):
            if value.startswith(prefix):
                value = "postgresql+psycopg://" + value[len(prefix) :]
                break
        return _postgresql_url(value)

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return level

    @field_validator("api_prefix")
    @classmethod
    def _path_prefix(cls, value: str) -> str:
        # Starlette mounts need "/x" (leading slash, none trailing); "" is the root.
        stripped = value.strip().strip("/")
        if any(c in stripped for c in "?#") or any(c.isspace() for c in stripped):
            raise ValueError(f"must be a URL path such as /memory, got {value!r}")
        return f"/{stripped}" if stripped else ""

    @field_validator("jwt_algorithms")
    @classmethod
    def _no_none_alg(cls, value: list[str]) -> list[str]:
        if any(a.lower() == "none" for a in value):
            raise ValueError("jwt_algorithms must not contain 'none'")
        return value

    @field_validator("jwt_rotation_secrets", "jwt_rotation_public_keys")
    @classmethod
    def _no_blank_key(cls, value: list[str]) -> list[str]:
        # An empty HMAC secret would let anyone sign tokens.
        if any(not key.strip() for key in value):
            raise ValueError("must not contain an empty entry")
        return value

    @property
    def external_database_url(self) -> str | None:
        """The PostgreSQL URL to connect to; None: the embedded server."""
        return None if self.database_url == EMBEDDED_DATABASE else self.database_url

    @property
    def resolved_sandbox_root(self) -> Path:
        return self.sandbox_root or self.data_dir / "sandboxes"


def unset_database_problem(settings: Settings) -> str | None:
    """Why ``settings`` may not open a database, or None: production with no URL (an empty
    or misspelled variable must not give each replica a database of its own).

    Checked where a database is opened (``Database.open``, and every CLI command but
    ``memstrata token`` and ``memstrata conflicts`` before it starts anything), not when
    settings are read: signing a token opens none, nor does reading a sandbox. The JWT
    settings are likewise checked where tokens are verified or signed
    (``memstrata.api.auth.require_token_keys``)."""
    if settings.environment != "production" or settings.database_url is not None:
        return None
    return (
        "MEMSTRATA_ENVIRONMENT=production needs MEMSTRATA_DATABASE_URL: the PostgreSQL URL "
        "every replica shares, or `embedded` for the embedded server in MEMSTRATA_DATA_DIR "
        "(one machine only)"
    )


def check_setting_names(given: Iterable[str], known: Iterable[str]) -> None:
    """``UnknownSettingError`` for the names in ``given`` (keyword arguments, after
    pydantic-settings matched them to fields regardless of case) that are no setting."""
    fields = list(known)
    unknown = [name for name in given if name not in fields]
    if not unknown:
        return
    problems = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), fields, n=1, cutoff=0.6)
        problems.append(f"{name!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    one = len(unknown) == 1
    raise UnknownSettingError(
        f"Settings() got {'an unknown keyword argument' if one else 'unknown keyword arguments'} "
        f"{', '.join(problems)}: no setting has {'that name' if one else 'these names'} "
        "(every setting is listed in docs/CONFIGURATION.md and Settings.model_fields)"
    )


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``MEMSTRATA_*`` variables that name no setting, each with the closest setting's
    variable (or None): pydantic ignores them, so a misspelling would go unnoticed."""
    known = [f"MEMSTRATA_{name.upper()}" for name in Settings.model_fields]
    return [
        (name, next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.8)), None))
        for name in sorted(environ)
        if name.startswith("MEMSTRATA_") and name not in known and name not in TOOLING_VARIABLES
    ]
