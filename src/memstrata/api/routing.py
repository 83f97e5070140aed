"""The route class every memstrata route uses, and the dependencies routes declare.

Each route carries its app's :class:`ApiContext` and wraps its handler with the request
body limit and the error mapping of :mod:`memstrata.api.errors`. Because this lives on the
routes, not on the app, a host platform that mounts ``create_router(...)`` into its own
FastAPI app gets the same limits, errors and authentication.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, ClassVar, TypeVar

from fastapi import Depends, Request, Response, Security
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.types import Message, Receive

from memstrata.api.context import ApiContext
from memstrata.api.errors import ApiError, error_response
from memstrata.api.validation_errors import unparsed_body_error
from memstrata.config import Settings

# Declares the bearer scheme in the OpenAPI document (the "Authorize" button of /docs).
# Stateless; the header itself is parsed by Authenticator.
_BEARER_SCHEME = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="JWT; see docs/API.md. Development tokens: `memstrata token --user <id>`.",
)


def route_class(context: ApiContext) -> type[APIRoute]:
    """An ``APIRoute`` subclass bound to ``context``."""

    class MemstrataRoute(APIRoute):
        api_context: ClassVar[ApiContext] = context

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            limit = body_limit(self.endpoint, context.settings)
            needs_auth = _depends_on(self.dependant, current_user)
            path_checks = _path_checks(self.dependant)

            async def guarded(request: Request) -> Response:
                try:
                    if needs_auth:
                        # Authentication first, always: FastAPI parses the body before it
                        # runs dependencies, which would answer a stranger's bad JSON 422.
                        request.state.user_id = context.auth.authenticate(
                            request.headers.get("authorization")
                        )
                    refuse_declared_overflow(request.headers.get("content-length"), limit)
                    for check, names in path_checks:  # ...and the URL before the body
                        await check(**{n: request.path_params[n] for n in names})
                    return await handler(await with_body_limit(request, limit))
                except Exception as exc:
                    if isinstance(exc, RequestValidationError) and isinstance(exc.body, bytes):
                        # FastAPI leaves the body as bytes when the Content-Type is not JSON.
                        exc = unparsed_body_error(exc, request.headers.get("content-type"))
                    response = error_response(exc, request.scope)
                    if response is None:
                        raise
                    return response

            return guarded

    return MemstrataRoute


class _AnythingConvertor(PathConvertor):
    """Like ``path``, but also across newlines (``.`` in starlette's ``.*`` does not)."""

    regex = r"[\s\S]*"


def register_anything_convertor() -> None:
    """``{name:anything}`` in a route path: any characters at all, even none, ``/`` and
    newlines, reach the route (after authentication) and get its clear 400, not a 404
    "Not Found" that answers before the token is checked. Idempotent."""
    register_url_convertor("anything", _AnythingConvertor())


def one_trailing_slash_dropped(name: str) -> str:
    """``user/`` as ``user``: before names could hold ``/``, Starlette redirected such a
    path to the one without the slash, and clients that follow redirects still mean it."""
    stem = name.removesuffix("/")
    return stem if stem and "/" not in stem else name


def _depends_on(dependant: Dependant, call: Callable[..., Any]) -> bool:
    return any(dep.call is call or _depends_on(dep, call) for dep in dependant.dependencies)


PathCheck = Callable[..., Coroutine[Any, Any, object]]
_PATH_CHECKS: set[PathCheck] = set()


def checked_before_body(check: PathCheck) -> PathCheck:
    """Mark an async dependency that reads only path parameters (a file name): the route
    runs it before reading the body, so a malformed body's 422 cannot hide its 400.
    FastAPI itself parses the body before it runs any dependency."""
    _PATH_CHECKS.add(check)
    return check


def _path_checks(dependant: Dependant) -> list[tuple[PathCheck, list[str]]]:
    found: list[tuple[PathCheck, list[str]]] = []
    for dep in dependant.dependencies:
        if dep.call in _PATH_CHECKS:
            found.append((dep.call, [p.name for p in dep.path_params]))
        found += _path_checks(dep)
    return found


Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
# The attribute of an endpoint that reads more than MEMSTRATA_MAX_REQUEST_BYTES: a function
# of the settings giving its body limit (:func:`larger_body`).
_BODY_LIMIT = "memstrata_body_limit"


def larger_body(limit: Callable[[Settings], int]) -> Callable[[Endpoint], Endpoint]:
    """Mark an endpoint whose body limit is ``limit(settings)`` rather than
    ``max_request_bytes`` (the memory-file PUT: a file at its own limit must fit however
    its JSON escapes it)."""

    def mark(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, _BODY_LIMIT, limit)
        return endpoint

    return mark


def body_limit(endpoint: Callable[..., Any], settings: Settings) -> int:
    """The most bytes of body ``endpoint``'s route reads (413 above)."""
    own = getattr(endpoint, _BODY_LIMIT, None)
    return settings.max_request_bytes if own is None else int(own(settings))


# What a REST client over the body limit should do. Only a batch of turns fits the default
# limit's megabyte legitimately (a memory file is 256 KiB at most), hence the fix named;
# the MCP endpoint names its own (it has no batch).
REST_BODY_FIX = "send a smaller body, e.g. a batch's turns over several requests"


async def with_body_limit(request: Request, limit: int) -> Request:
    """Read the body (refusing more than ``limit`` bytes) and hand on a replaying request."""
    return Request(request.scope, replaying(await read_body(request, limit), request.receive))


async def read_body(request: Request, limit: int, fix: str = REST_BODY_FIX) -> bytes:
    """The whole body, refusing more than ``limit`` bytes with the JSON 413 (the REST
    routes, and the MCP endpoint, whose SDK would answer in plain text), whose message
    says ``fix``. A declared ``Content-Length`` over the limit was refused before."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(size, limit, fix, at_least=True)
        chunks.append(chunk)
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body``, already read from it, delivered first."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def refuse_declared_overflow(
    content_length: str | None, limit: int, fix: str = REST_BODY_FIX
) -> None:
    """413 at once for a ``Content-Length`` over ``limit``, before anything is read (the
    REST routes, and the MCP endpoint, whose SDK would answer in plain text)."""
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise too_large(int(content_length), limit, fix)


def too_large(size: int, limit: int, fix: str, *, at_least: bool = False) -> ApiError:
    """The 413 of a whole body, saying ``fix``; content over the file limit has its own
    (``ContentTooLargeError``: shorten the file)."""
    amount = f"at least {size}" if at_least else str(size)
    return ApiError(
        413,
        f"request body is {amount} bytes, over the limit of {limit} bytes ({fix}; an "
        "operator can raise MEMSTRATA_MAX_REQUEST_BYTES)",
    )


async def get_context(request: Request) -> ApiContext:
    """The context of the route that matched (set by :func:`route_class`). Async only so
    that FastAPI calls it in the event loop instead of handing it to a worker thread."""
    context = getattr(request.scope.get("route"), "api_context", None)
    if not isinstance(context, ApiContext):
        raise RuntimeError("memstrata routes must be built by memstrata.api.create_router")
    return context


async def current_user(
    request: Request,
    context: Annotated[ApiContext, Depends(get_context)],
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER_SCHEME)],
) -> str:
    """The authenticated user id; 401 otherwise. Also recorded for the request log."""
    known = getattr(request.state, "user_id", None)  # the route class checked it already
    user_id = known or context.auth.authenticate(request.headers.get("authorization"))
    request.state.user_id = user_id
    return user_id


Context = Annotated[ApiContext, Depends(get_context)]
CurrentUser = Annotated[str, Depends(current_user)]
