"""A remote sandbox that hangs on chosen calls: the fault the sandbox deadline guards against.

Files live in a real local directory; every call first crosses a ``Link`` (the network to
a platform's sandbox host), which can hang the chosen calls. A hung call honours
cancellation (an ``await`` on a network client) or, with ``ignore_cancel``, swallows it
and carries on with the call once the test opens ``gate``.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio.to_thread

from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider

# Far beyond any deadline the tests set: without one, the test's own bound fails first.
HANG_S = 60.0


@dataclass
class Link:
    hang: Callable[[str, str], bool] = lambda operation, path: False
    ignore_cancel: bool = False
    gate: threading.Event = field(default_factory=threading.Event)
    calls: list[tuple[str, str]] = field(default_factory=list)
    cancelled: int = 0

    def hang_all(self) -> None:
        self.hang = lambda operation, path: True

    def hang_writes(self) -> None:
        self.hang = lambda operation, path: operation == "write_text"

    def heal(self) -> None:
        self.hang = lambda operation, path: False

    async def cross(self, operation: str, path: str) -> None:
        self.calls.append((operation, path))
        if not self.hang(operation, path):
            return
        try:
            await asyncio.sleep(HANG_S)
        except asyncio.CancelledError:
            self.cancelled += 1
            if not self.ignore_cancel:
                raise
            # A client that finishes what it started whatever happens: it goes on with the
            # call once the test opens the gate.
            await anyio.to_thread.run_sync(self.gate.wait, HANG_S)


class RemoteSandbox:
    def __init__(self, inner: LocalDirectorySandbox, link: Link) -> None:
        self.inner = inner
        self.link = link

    @property
    def case_sensitive(self) -> bool:
        return self.inner.case_sensitive

    async def read_text(self, path: str) -> str | None:
        await self.link.cross("read_text", path)
        return await self.inner.read_text(path)

    async def write_text(self, path: str, content: str) -> None:
        await self.link.cross("write_text", path)
        await self.inner.write_text(path, content)

    async def exists(self, path: str) -> bool:
        await self.link.cross("exists", path)
        return await self.inner.exists(path)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        await self.link.cross("list", prefix)
        return await self.inner.list(prefix)

    async def delete(self, path: str) -> None:
        await self.link.cross("delete", path)
        await self.inner.delete(path)


class RemoteProvider:
    """A host platform's provider: sandboxes over ``link``, files in ``local``."""

    def __init__(self, local: LocalSandboxProvider, link: Link) -> None:
        self.local = local
        self.link = link

    def for_user(self, user_id: str, session_id: str | None = None) -> RemoteSandbox:
        return RemoteSandbox(self.local.for_user(user_id, session_id), self.link)
