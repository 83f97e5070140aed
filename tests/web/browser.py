"""Finding the system Chromium that the browser tests drive (Debian's ``chromium`` package).

Playwright's own browser download is never used: the tests launch the distribution's
Chromium through ``executable_path``. ``CHROMIUM_PATH`` overrides the search.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

INSTALL_HINT = (
    "the browser tests need Chromium: `apt-get install chromium` (Debian/Ubuntu; `make test` "
    "does it when run as root), or set CHROMIUM_PATH to a Chromium/Chrome executable"
)
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The Chromium executable: ``CHROMIUM_PATH`` if set, else the first one on PATH."""
    configured = os.environ.get("CHROMIUM_PATH")
    if configured:
        return configured if Path(configured).is_file() else None
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    """The executable, or: a failure under CI=true (a missing browser must not pass CI
    silently), a skip elsewhere saying how to install it."""
    found = find_chromium()
    if found is not None:
        return found
    configured = os.environ.get("CHROMIUM_PATH")
    reason = f"CHROMIUM_PATH={configured!r} is not a file; " if configured else ""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}no Chromium found and CI=true: {INSTALL_HINT}", pytrace=False)
    pytest.skip(f"{reason}no Chromium found: {INSTALL_HINT}")
