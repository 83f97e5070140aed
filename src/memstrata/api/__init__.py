"""The HTTP API: an app factory and a mountable router (thin: auth, parse, call, map)."""

from memstrata.api.app import create_app, create_router
from memstrata.api.context import ApiContext

__all__ = ["ApiContext", "create_app", "create_router"]
