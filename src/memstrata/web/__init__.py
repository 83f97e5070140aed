"""The memory settings page: static HTML/CSS/JS served beside the API, no build step.

The page is a client of the public REST API (``/api/config/...``, ``/api/memory/...``) with
a bearer token the user pastes, and has no rules of its own: the one route that is the
page's own, ``POST /web/merge`` (:mod:`memstrata.web.merge`), is a thin transport over the
server's three-way merge, so "re-apply my edits" after a conflict merges exactly as the
sandbox sync does. Serving it is three routes: the page at ``/``, its assets at
``/web/<name>`` and the merge. ``create_app`` includes them unless ``MEMSTRATA_WEB_UI=false``;
a host platform can include :func:`web_router` under the same prefix as the API router (the
page calls ``api/...`` and ``web/merge`` relative to itself), or leave it out and use its own
frontend. See docs/WEB.md.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

if TYPE_CHECKING:
    from memstrata.api.context import ApiContext
    from memstrata.runtime import Memstrata

# Only these files are served: no directory listing, no path handling to get wrong.
ASSETS: dict[str, str] = {
    "app.css": "text/css; charset=utf-8",
    "conflict.css": "text/css; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "diff.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "files.js": "text/javascript; charset=utf-8",
    "file-state.js": "text/javascript; charset=utf-8",
    "file-view.js": "text/javascript; charset=utf-8",
    "file-save.js": "text/javascript; charset=utf-8",
    "file-conflict.js": "text/javascript; charset=utf-8",
    "conflict-diff.js": "text/javascript; charset=utf-8",
    "file-resolve.js": "text/javascript; charset=utf-8",
    "file-drafts.js": "text/javascript; charset=utf-8",
    "file-aside.js": "text/javascript; charset=utf-8",
    "skills.js": "text/javascript; charset=utf-8",
    "search.js": "text/javascript; charset=utf-8",
    "search-marks.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}

# The token lives in sessionStorage, so script injection is the threat that matters: the
# page renders every server string as text, and the policy forbids inline and foreign code.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes:
    return files("memstrata.web").joinpath("static", name).read_bytes()


def web_router(memstrata: Memstrata | ApiContext) -> APIRouter:
    """``GET /`` (the page), ``GET /web/{name}`` (its assets) and ``POST /web/merge`` (the
    page's re-apply); not in the OpenAPI schema. The merge route authenticates like the API
    routes, with the context of ``memstrata`` (a runtime, or the
    :class:`~memstrata.api.context.ApiContext` given to ``create_router``)."""
    # Imported here: memstrata.api (which the merge route is built on) imports this module.
    from memstrata.web.merge import merge_router

    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def page() -> Response:
        return Response(
            _read("index.html"), media_type="text/html; charset=utf-8", headers=_HEADERS
        )

    @router.get("/web/{name}")
    def asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise HTTPException(404, f"no web asset named {name[:60]!r}")
        return Response(_read(name), media_type=media_type, headers=_HEADERS)

    router.include_router(merge_router(memstrata))
    return router
