"""memstrata: layered, per-user memory for AI agents."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def package_version() -> str:
    """This release's version: pyproject.toml's, read from the installed package's metadata
    (its one definition; ``0.0.0`` in a source tree that was never installed). Shown by
    ``memstrata --version``, the serve banner, the start-up log line, ``/metrics``
    (``memstrata_build_info``) and the OpenAPI document."""
    try:
        return version("memstrata")
    except PackageNotFoundError:
        return "0.0.0"


def __getattr__(name: str) -> str:
    # ``memstrata.__version__``, computed on first use rather than at import.
    if name == "__version__":
        return package_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
