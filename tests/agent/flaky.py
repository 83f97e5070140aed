"""A sandbox behind a flaky link, for the tests of the tools' failure paths.

``FlakyProvider`` hands out wrappers over real directories (``LocalSandboxProvider``) whose
calls fail as a remote workspace's do: a share of them at random (``rate``, seeded), and
those named in ``plan`` (``fail_next(op, path)``: the next such call fails). A failed
write either never arrived or — with ``landed`` — arrived and still reported a failure, as
a request that timed out after the workspace had written it.
"""

from __future__ import annotations

import builtins
import random
from collections import Counter

from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider


class LinkDown(TimeoutError):
    """What the flaky link raises."""


class FlakyLink:
    """The failure plan shared by every sandbox handle of one provider."""

    def __init__(self, seed: int = 0, rate: float = 0.0, landed: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.rate = rate
        self.landed = landed  # share of failed writes that still reached the sandbox
        self.planned: Counter[tuple[str, str]] = Counter()
        self.waiting: Counter[tuple[str, str, str]] = Counter()  # (after, op, path)
        self.failures = 0

    def fail_next(self, op: str, path: str, *, times: int = 1, after: str | None = None) -> None:
        """The next ``times`` calls ``op`` of ``path`` fail; with ``after``, the first one
        that follows the next ``after`` call of ``path`` does."""
        if after is None:
            self.planned[(op, path)] += times
        else:
            self.waiting[(after, op, path)] += times

    def fails(self, op: str, path: str) -> bool:
        for after, planned_op, planned_path in list(self.waiting):
            if (after, planned_path) == (op, path):
                self.planned[(planned_op, path)] += self.waiting.pop((after, planned_op, path))
                return False  # the call that arms the plan goes through
        if self.planned[(op, path)] > 0:
            self.planned[(op, path)] -= 1
            self.failures += 1
            return True
        if self.rate and self.rng.random() < self.rate:
            self.failures += 1
            return True
        return False

    def lands(self) -> bool:
        return bool(self.landed) and self.rng.random() < self.landed


class FlakySandbox:
    def __init__(self, inner: LocalDirectorySandbox, link: FlakyLink) -> None:
        self.inner = inner
        self.link = link
        self.case_sensitive = inner.case_sensitive

    def _check(self, op: str, path: str) -> None:
        if self.link.fails(op, path):
            raise LinkDown(f"{op} {path} timed out")

    async def read_text(self, path: str) -> str | None:
        self._check("read", path)
        return await self.inner.read_text(path)

    async def write_text(self, path: str, content: str) -> None:
        if self.link.fails("write", path):
            if self.link.lands():
                await self.inner.write_text(path, content)
            raise LinkDown(f"write {path} timed out")
        await self.inner.write_text(path, content)

    async def exists(self, path: str) -> bool:
        self._check("exists", path)
        return await self.inner.exists(path)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        self._check("list", prefix)
        return await self.inner.list(prefix)

    async def delete(self, path: str) -> None:
        self._check("delete", path)
        await self.inner.delete(path)


class FlakyProvider:
    def __init__(self, inner: LocalSandboxProvider, link: FlakyLink) -> None:
        self.inner = inner
        self.link = link

    def for_user(self, user_id: str, session_id: str | None = None) -> Sandbox:
        return FlakySandbox(self.inner.for_user(user_id, session_id), self.link)
