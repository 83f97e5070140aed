"""The serving part of ``Settings``: bearer tokens, the HTTP and MCP servers, and logging.
``memstrata.config.Settings`` inherits it; import from there.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from memstrata.config_bounds import (
    INTERVAL_WHY,
    MAX_CONNECTIONS,
    MAX_INTERVAL_S,
    MAX_REQUEST_BYTES,
    MAX_TIMEOUT_S,
    MAX_TOKEN_LIFETIME_S,
    TIMEOUT_WHY,
)
from memstrata.config_secrets import Secret
from memstrata.config_storage import is_blank

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# MCP sessions one process holds, at most: ~90 KB each, so 100,000 are 9 GB that no cache
# budget counts.
MAX_SESSIONS = 100_000
SESSIONS_WHY = f"At most {MAX_SESSIONS} (~9 GB of sessions)"


class ServingSettings(BaseModel):
    """Who may call, and how memstrata is served and logs (the last part of ``Settings``)."""

    jwt_secret: Secret | None = Field(default=None, description="HS256 secret for bearer tokens.")
    jwt_public_key: str | None = Field(
        default=None, description="PEM public key for RS256/ES256 tokens (instead of a secret)."
    )
    jwt_rotation_secrets: list[Secret] = Field(
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
        default=30.0,
        ge=0,
        le=600,
        allow_inf_nan=False,
        description="Clock skew allowed on exp/nbf/iat, seconds, from 0 to 600.",
    )
    jwt_max_lifetime_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TOKEN_LIFETIME_S,
        allow_inf_nan=False,
        description="Refuse a token whose `exp` is further away than this many seconds "
        "(plus the leeway), whatever its issuer chose: it bounds how long a leaked token "
        "works. Unset: no bound, the issuer decides `exp` (even `exp` = 10^30 passes); in "
        "production `memstrata serve` then logs one WARNING at start-up "
        "(`auth.token_lifetime_unbounded`): set it to the longest lifetime your issuer gives, "
        f"e.g. 86400; at most {MAX_TOKEN_LIFETIME_S} (366 days: a longer bound bounds "
        "nothing).",
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
        default=8700,
        ge=0,
        le=65535,
        description="`memstrata serve` port, from 0 to 65535; 0 picks a free one.",
    )
    shutdown_grace_s: int = Field(
        default=15,
        ge=0,
        le=MAX_TIMEOUT_S,
        description="On SIGTERM, `memstrata serve` waits this long for requests in flight; "
        "those still running then get a 503 (`shutting_down`, Retry-After), and their work "
        "(a worker thread, a memory-file write under way) gets one passage embedding call's "
        "timeout more (13 s with the default timeouts and batch size) before the runtime "
        "closes; then the embedded PostgreSQL and the local embedding servers stop. Keep "
        "Kubernetes' terminationGracePeriodSeconds at least the preStop hook + this + 13 + "
        "2: with a 5 s preStop, 35 — above the default 30 (docs/DEPLOY.md). `memstrata mcp` "
        "(stdio) waits as long, at the end of its stdin, for the requests it has read; "
        f"{TIMEOUT_WHY}.",
    )
    max_connections: int | None = Field(
        default=None,
        ge=2,
        le=MAX_CONNECTIONS,
        description="Connections `memstrata serve` serves at once (uvicorn's "
        "`limit_concurrency`): a request that arrives while this many connections are open "
        "(its own included) or this many requests run gets uvicorn's plain-text 503 at once, "
        "/readyz's too, so a load balancer steers around a flooded replica. Unset: half the "
        "process's open-file limit (soft RLIMIT_NOFILE, `ulimit -n`; 512 under systemd's "
        "default of 1024), at most 4096: uvicorn still accepts the connections beyond the "
        "limit, so the other half is left for them and for the files and database and "
        "embedding connections the requests use; 4096 holds an open /mcp GET stream for each "
        "of the default 2000 MEMSTRATA_MCP_MAX_SESSIONS and as many other connections. It "
        "closes no connection: one that sends nothing, or trickles its headers, holds its "
        "place until MEMSTRATA_HEADER_TIMEOUT_S ends it. At most "
        f"{MAX_CONNECTIONS} (Linux's highest open-file limit).",
    )
    header_timeout_s: float = Field(
        default=20.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="`memstrata serve` closes a connection whose request headers have not "
        "all arrived this many seconds after it opened, or after the first byte of its next "
        "request (the idle wait between requests is uvicorn's keep-alive timeout, 5 s): "
        "without it, a few hundred connections sending nothing, or their headers a byte at a "
        "time, held every MEMSTRATA_MAX_CONNECTIONS place and everyone else got 503. The "
        "connection is closed without an answer, as nginx's client_header_timeout does, and "
        "logged (`http.header_timeout`, INFO) and counted "
        "(`memstrata_http_header_timeouts_total`). A slow request body and an open /mcp GET "
        "stream are not its business (a body: MEMSTRATA_BODY_TIMEOUT_S). 20 s is Apache's "
        "mod_reqtimeout default (nginx: 60 s): room for a few TCP retransmissions of a "
        "request sent at once. A reverse proxy's timeouts still bound the TLS handshake "
        f"(docs/DEPLOY.md, section 6); {TIMEOUT_WHY}.",
    )
    body_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="`memstrata serve` answers 408 (`request_timeout`) and closes the "
        "connection when a request's body, once its headers are in, stops arriving: nothing "
        "more for this many seconds before the body the client announced is complete. It "
        "bounds the gap between two parts of a body, not the whole upload, and does not run "
        "while the server itself holds the body back (the application has not read what "
        "came) or the client waits for `100 Continue`. Without it, a client that stopped "
        "mid-body held its connection and its request for ever. Logged "
        "(`http.body_timeout`, INFO) and counted (`memstrata_http_body_timeouts_total`). "
        f"60 s is nginx's client_body_timeout default; {TIMEOUT_WHY}.",
    )
    max_request_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=MAX_REQUEST_BYTES,
        description="Largest HTTP request body (413 above), and the longest line "
        "`memstrata mcp` (stdio) reads (-32600 above); at most "
        f"{MAX_REQUEST_BYTES} (1 GiB: a body is held in memory whole).",
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
        le=MAX_SESSIONS,
        description="MCP sessions (/mcp) one user may hold open at once; the next initialize "
        "gets 429 (`too_many_sessions`). A client holds one per connection and ends it with "
        "DELETE, so 32 covers several clients at once (an IDE, a few terminals, parallel "
        "agents) and what crashed ones leave until it idles out, while one user's runaway loop "
        "holds at most 32 of the sessions the process allows (MEMSTRATA_MCP_MAX_SESSIONS). "
        f"{SESSIONS_WHY}.",
    )
    mcp_max_sessions: int = Field(
        default=2000,
        ge=1,
        le=MAX_SESSIONS,
        description="MCP sessions (/mcp) the process holds open at once, all users together "
        "(each costs ~90 KB of memory no cache budget counts). A new session past it ends the "
        "least recently used idle session of any user (its client gets 404 and initializes "
        "again, as the MCP spec says) or, while every session has a request in flight, gets "
        "503 (`too_many_sessions_on_server`) with Retry-After. The MCP SDK's own cap (10 000) "
        f"refused every user's new session once reached. {SESSIONS_WHY}.",
    )
    mcp_session_idle_timeout_s: float = Field(
        default=1800,
        gt=0,
        le=MAX_INTERVAL_S,
        allow_inf_nan=False,
        description="An MCP session with no request in flight (an open GET stream counts as "
        "one) ends after this long and frees its slot; its id then answers 404 and the client "
        "initializes again. 1800 is the MCP SDK's own default; "
        f"{INTERVAL_WHY}.",
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
    log_level: str = Field(
        default="INFO",
        description="Logging level. Short CLI commands (`db status`, `user erase`, …) log at "
        "WARNING unless this is set; audit events (`user.erased`, logger `memstrata.audit`) "
        "are logged whatever the level.",
    )
    log_json: bool = Field(default=True, description="One JSON object per log line.")

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
        if any(map(is_blank, value)):
            raise ValueError("must not contain an empty entry")
        return value
