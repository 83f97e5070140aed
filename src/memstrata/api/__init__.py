"""The HTTP API: an app factory and a mountable router (thin: auth, parse, call, map).

The names are loaded on first use: a module of the package (``memstrata.api.auth`` for
``memstrata token``) is imported without the app, the runtime and FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstrata.api.app import create_app, create_router
    from memstrata.api.context import ApiContext

__all__ = ["ApiContext", "create_app", "create_router"]


def __getattr__(name: str) -> Any:
    if name in ("create_app", "create_router"):
        from memstrata.api import app

        return getattr(app, name)
    if name == "ApiContext":
        from memstrata.api.context import ApiContext

        return ApiContext
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
