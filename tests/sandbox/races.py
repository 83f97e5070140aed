"""Helpers for the race tests: a real sandbox whose chosen calls first run a hook.

"Another process" is a second SyncService over the same database and sandbox root, with a
provider of its own (so no lock state is shared but the kernel's). A hook is how such a
process — or a shell in the agent's container — acts at one exact point of a sync.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider

Hook = Callable[[], Awaitable[None]]
# (session id, "read" or "write", path) -> hook, run once before that call.
HookKey = tuple[str | None, str, str]


class HookedSandbox:
    """A real local sandbox (its ``exclusive()`` included) that runs a hook before a chosen
    read or write."""

    def __init__(
        self, inner: LocalDirectorySandbox, session_id: str | None, hooks: dict[HookKey, Hook]
    ) -> None:
        self.inner = inner
        self.session_id = session_id
        self.hooks = hooks
        self.case_sensitive = inner.case_sensitive

    async def _hook(self, op: str, path: str) -> None:
        hook = self.hooks.pop((self.session_id, op, path), None)
        if hook is not None:
            await hook()

    async def read_text(self, path: str) -> str | None:
        await self._hook("read", path)
        return await self.inner.read_text(path)

    async def write_text(self, path: str, content: str) -> None:
        await self._hook("write", path)
        await self.inner.write_text(path, content)

    async def exists(self, path: str) -> bool:
        return await self.inner.exists(path)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        return await self.inner.list(prefix)

    async def delete(self, path: str) -> None:
        await self.inner.delete(path)

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        return self.inner.exclusive()


class HookedProvider:
    """Hands out :class:`HookedSandbox` handles over a provider of its own."""

    def __init__(self, inner: LocalSandboxProvider) -> None:
        self.inner = inner
        self.hooks: dict[HookKey, Hook] = {}

    def for_user(self, user_id: str, session_id: str | None = None) -> HookedSandbox:
        return HookedSandbox(self.inner.for_user(user_id, session_id), session_id, self.hooks)
