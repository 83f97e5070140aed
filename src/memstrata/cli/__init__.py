"""The ``memstrata`` command line. Each module registers its commands on ``app``."""

from __future__ import annotations

import typer

from memstrata.cli.app import app


def build_app() -> typer.Typer:
    """The app with every command registered (tests drive this through Typer's runner)."""
    _register()
    return app


def main() -> None:
    build_app()()


def _register() -> None:
    # Imported for their side effect of adding commands; kept out of module import time so
    # that importing memstrata.cli stays cheap.
    from memstrata.cli import db  # noqa: F401

    for optional in ("serve", "search", "bench", "mcp"):
        try:
            __import__(f"memstrata.cli.{optional}")
        except ModuleNotFoundError as exc:
            if exc.name != f"memstrata.cli.{optional}":
                raise


__all__ = ["app", "build_app", "main"]
