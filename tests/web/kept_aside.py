"""A kept-aside copy made as sync makes it, for the tests of the page's notice
(test_kept_aside) and its accessibility audit (test_axe): the agent edits a line of
MEMORY.md in its sandbox (the real directory of the server under test), and the user saves
an edit of the same line through the API before it is read back."""

from __future__ import annotations

from pathlib import Path

from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.state import CONFLICT_DIR
from tests.web.server import Serve

BASE = "# MEMORY\n- likes tea\n- lives in Lyon\n"
HUMAN = BASE.replace("Lyon", "Paris")
# Markup in the agent's text must show as text: the viewer never parses it.
AGENT = BASE.replace("Lyon", 'Marseille <img src=x onerror="window.hacked=1">')


def sandbox(server: Serve, user: str) -> Path:
    """``user``'s sandbox directory on ``server``."""
    return server.workdir / "data" / "sandboxes" / safe_dir_name(user)


def real_conflict(server: Serve, user: str) -> Path:
    """The user's edit wins over the agent's of the same line; the agent's is kept aside."""
    with server.rest(user) as rest:
        first = rest.put("/api/config/agent-files/memory", json={"content": BASE})
        first.raise_for_status()
        (sandbox(server, user) / "MEMORY.md").write_text(AGENT)  # the agent's shell
        rest.put(
            "/api/config/agent-files/memory",
            json={"content": HUMAN},
            headers={"If-Match": f'"{first.json()["version"]}"'},
        ).raise_for_status()
    [copy] = (sandbox(server, user) / CONFLICT_DIR).iterdir()
    return copy
