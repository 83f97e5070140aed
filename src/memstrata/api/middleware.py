"""Request logging and metrics for every request, as one pure ASGI middleware.

One structured log line per request (event ``http.request``: method, path, route template,
status, duration, user id once authenticated, request id) and the HTTP metrics. The
line is INFO, WARNING for a 5xx, and DEBUG for an answered probe or scrape (``/healthz``,
``/readyz``, ``/metrics`` below 400): scraped every few seconds by each prober, they were a
sixth of a busy server's log and said nothing. The request id is the caller's
``X-Request-ID`` when it is a short token, else a new one; every event logged while the
request is served carries it (:func:`memstrata.logs.serving_request`); it is echoed in
the response, with ``Server-Timing: app;dur=<ms>`` (the time from this
middleware to the response's first byte: what the client waited for beyond the network
and the server's accept queue). Redirects get a relative ``Location`` (never one built from the
client's ``Host`` header). :class:`ResponseHeadersMiddleware` keeps every /api answer out of
caches and every answer from being sniffed; :class:`LocalCallerMiddleware` tells the
authentication whether the caller is on this machine.
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
import time
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api.auth import CALLER_HOST
from memstrata.api.metrics import UNMATCHED_ROUTE, ApiMetrics
from memstrata.logs import log_event, serving_request

logger = logging.getLogger("memstrata.api.access")

_REQUEST_ID = re.compile(r"\A[A-Za-z0-9._:-]{1,64}\Z")
# Any other method is labelled OTHER, so clients cannot grow the label set.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# New request ids: a random prefix per process and a counter (32 hex digits). uuid4 asked
# the kernel for randomness on every request: 8 % of the event loop in the writer benchmark.
_ID_PREFIX = secrets.token_hex(8)
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


# No HTTP status says "the client closed the connection before the answer"; nginx logs
# 499 for it, and so do the request log and the metrics here.
CLIENT_CLOSED_REQUEST = 499

# The operations routes, whose answered requests are logged at DEBUG.
PROBE_PATHS = ("/healthz", "/readyz", "/metrics")


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp, metrics: ApiMetrics, prefix: str = "") -> None:
        self.app = app
        self.metrics = metrics
        self.prefix = prefix.rstrip("/")
        self.probes = frozenset(f"{self.prefix}{path}" for path in PROBE_PATHS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = Headers(scope=scope).get("x-request-id", "")
        request_id = incoming if _REQUEST_ID.match(incoming) else new_request_id()
        state = scope.setdefault("state", {})
        if isinstance(state, dict):  # for the cause's log line (``errors.error_response``)
            state["request_id"] = request_id
        status = 500  # what the client gets if the app raises before responding
        responded = disconnected = False

        async def receive_watching() -> Message:
            nonlocal disconnected
            message = await receive()
            disconnected = disconnected or message["type"] == "http.disconnect"
            return message

        async def send_with_id(message: Message) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status, responded = message["status"], True
                headers = MutableHeaders(scope=message)
                headers.append("X-Request-ID", request_id)
                elapsed_ms = (time.perf_counter() - started) * 1000
                headers.append("Server-Timing", f"app;dur={elapsed_ms:.1f}")
                if status in (301, 302, 307, 308) and "location" in headers:
                    headers["location"] = relative_location(headers["location"])
            await send(message)

        try:
            with serving_request(request_id):
                await self.app(scope, receive_watching, send_with_id)
        finally:
            if disconnected and not responded:
                # The client hung up first (a short client timeout on a slow write): not
                # a server error, and its work may well have landed. nginx's 499.
                status = CLIENT_CLOSED_REQUEST
            seconds = time.perf_counter() - started
            route = route_template(scope, self.prefix)
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            self.metrics.observe_request(method, route, status, seconds)
            log_event(
                logger,
                "http.request",
                request_level(status, probe=route in self.probes),
                method=scope["method"],
                path=scope["path"],
                route=route,
                status=status,
                ms=round(seconds * 1000, 2),
                user_id=state.get("user_id") if isinstance(state, dict) else None,
                request_id=request_id,
            )


def request_level(status: int, *, probe: bool) -> int:
    """The level of a request's log line: a server error is a WARNING, an answered probe
    or scrape DEBUG, the rest INFO."""
    if status >= 500:
        return logging.WARNING
    return logging.DEBUG if probe and status < 400 else logging.INFO


def relative_location(location: str) -> str:
    """Path and query only: an absolute Location built from the client's Host header
    (starlette's trailing-slash redirect) would send the client wherever Host said."""
    parts = urlsplit(location)
    if not parts.scheme and not parts.netloc:
        return location
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path


def route_template(scope: Scope, prefix: str = "") -> str:
    """The matched route's path template; memstrata's routes get the prefix they were
    included under (FastAPI keeps a route's own path unprefixed)."""
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    if not isinstance(template, str):
        return UNMATCHED_ROUTE
    return f"{prefix}{template}" if hasattr(route, "api_context") else template


# What the API documentation pages (Swagger UI, ReDoc) may not do: be framed by another
# site (clickjacking a page that holds a pasted token), or have their assets sniffed. Their
# inline scripts rule out a script policy; the settings page has its own, stricter one.
DOCS_HEADERS = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


class DocsHeadersMiddleware:
    """``DOCS_HEADERS`` on the answers of ``paths`` (the documentation pages)."""

    def __init__(self, app: ASGIApp, paths: frozenset[str]) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *DOCS_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


NOSNIFF = (b"x-content-type-options", b"nosniff")
NO_STORE = (b"cache-control", b"no-store")


class ResponseHeadersMiddleware:
    """``X-Content-Type-Options: nosniff`` on every answer, and ``Cache-Control: no-store``
    on every answer under ``<prefix>/api`` that sets no ``Cache-Control`` of its own.

    The /api answers carry a user's memory (search hits, files, kept-aside copies) or say
    whose token was refused: no shared cache, nor the browser's disk cache, may keep one.
    A route that sets its own keeps it (a memory file's GET: ``private, no-cache`` with its
    ETag, so a client revalidates). The settings page, its assets and /mcp set their own or
    need none (/mcp answers POSTs, which caches do not store, and streams). ``create_app``
    puts this outside Starlette's outermost middleware, so a bug's 500 carries them too.
    """

    def __init__(self, app: ASGIApp, prefix: str = "") -> None:
        self.app = app
        self.api = f"{prefix.rstrip('/')}/api"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        api = path == self.api or path.startswith(f"{self.api}/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = [name.lower() for name, _ in headers]
                if NOSNIFF[0] not in names:
                    headers.append(NOSNIFF)
                if api and NO_STORE[0] not in names:
                    headers.append(NO_STORE)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class LocalCallerMiddleware:
    """The client's address, for the request's authentication: only a caller on this
    machine (loopback) is told which data directory signs development tokens
    (:data:`memstrata.api.auth.CALLER_HOST`; the address is judged only for such a 401)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        token = CALLER_HOST.set(client[0] if client else None)
        try:
            await self.app(scope, receive, send)
        finally:
            CALLER_HOST.reset(token)
