"""The sandboxes a process uses (``mem.sandboxes``), built in one place.

Apart from the runtime so that ``memstrata conflicts``, which needs the sandboxes alone,
builds the same ones without importing the database, the search or the HTTP stack.
"""

from __future__ import annotations

from memstrata.config import Settings
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.local import MAX_READ_BYTES, LocalSandboxProvider
from memstrata.sandbox.timed import TimedSandboxProvider, with_deadline

__all__ = ["build_sandboxes"]


def build_sandboxes(
    settings: Settings, sandboxes: SandboxProvider | None = None
) -> TimedSandboxProvider:
    """``mem.sandboxes``: the host's provider, or the local directories under
    ``resolved_sandbox_root``, with the deadline on every call. Built here and only here:
    every caller of mem.sandboxes (sync, agent and MCP tools, prompt building) then gets
    the deadline, whatever provider the host gave, and ``memstrata conflicts``, which
    needs the sandboxes alone, gets the same ones without opening a database."""
    return with_deadline(
        sandboxes
        or LocalSandboxProvider(
            settings.resolved_sandbox_root,
            file_mode=int(settings.sandbox_file_mode, 8),
            # Room above the content limit (a file over it is still read and kept
            # aside) and for base records, which hold a copy besides the content.
            max_read_bytes=max(MAX_READ_BYTES, 4 * settings.max_content_bytes),
        ),
        settings.sandbox_timeout_s,
    )
