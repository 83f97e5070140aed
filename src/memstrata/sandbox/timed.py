"""A deadline on every sandbox call, applied once around whatever provider the host gives.

A sandbox is a platform's remote workspace as often as a local directory, and a remote
call can hang. Sync holds the user's lock while it mirrors a file, so one hung call used
to hold every later tool call and frontend edit of that user, and a frontend edit that
had already committed its DB write never answered. ``Memstrata.open`` wraps the provider
with :func:`with_deadline`, so sync, the agent and MCP tools and prompt building all get
the same deadline with no code of their own.

A call still running after ``timeout_s`` is abandoned: it runs in a task of its own, which
is cancelled, and the caller gets :class:`~memstrata.errors.SandboxError` at once, without
waiting for the cancellation to take (the existing failure paths turn it into a
``sandbox_failed`` warning; the DB is never rolled back); ``sandbox.timeout`` is logged.
What happens to the call itself depends on the sandbox:

* an ``await`` on a network client is cancelled there, and the request is dropped (the
  remote end may still have carried it out);
* a blocking call in a worker thread (``LocalDirectorySandbox``'s file system calls) cannot
  be stopped: the task ends, the thread runs on, a write may still land after it was
  reported failed, and the process exit waits for the thread;
* a coroutine that swallows the cancellation runs on in its task; its end is logged
  (``sandbox.abandoned_ended``).

A late write usually carries the DB's copy, which the read-back rule then finds equal to
the DB (or already contained in a newer DB copy when it merges). After a timeout the same
sandbox (user, session) fails fast, without being called, for one more ``timeout_s``, and
for as long as an abandoned call's task runs on:

* one sync step makes up to three calls to a sandbox (read, base record, write), so a
  hung sandbox costs one timeout instead of three;
* a later call does not overtake an abandoned one within that time, which could otherwise
  land last and leave an older file or base record behind. A worker thread still blocked
  after it can be overtaken: this wrapper cannot see threads.

``exclusive()`` (a sandbox's optional cross-process lock, :mod:`memstrata.sandbox.exclusive`)
is passed through, its taking bounded by ``timeout_s`` too: a lock still held by another
process after that is a :class:`~memstrata.errors.SandboxError` (no strike: the sandbox
answered). It is taken in the caller's own task, which the lock is re-entrant for.

A result of another type than the protocol's (``bytes`` from ``read_text``, a list that
holds a non-``str`` from ``list``, a non-``bool`` from ``exists``) is a
:class:`~memstrata.errors.SandboxError` naming the method and the type, like a call that
failed, rather than an ``AttributeError`` wherever a caller first uses the value.

``for_user`` is synchronous in the protocol and its callers run it on the event loop, so
it cannot be abandoned: a provider must return a handle without network I/O (connect on
the first call). One that takes ``timeout_s`` or longer is logged
(``sandbox.slow_for_user``).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from memstrata.errors import SandboxError
from memstrata.logs import describe, log_event, log_failure
from memstrata.sandbox.base import Sandbox, SandboxProvider
from memstrata.sandbox.exclusive import exclusive

logger = logging.getLogger(__name__)

T = TypeVar("T")
_Key = tuple[str, str | None]  # (user_id, session_id): one sandbox


def with_deadline(provider: SandboxProvider, timeout_s: float) -> TimedSandboxProvider:
    """``provider`` with a deadline of ``timeout_s`` on every sandbox call; a provider
    already wrapped is returned as it is (its own deadline kept), never wrapped twice."""
    if isinstance(provider, TimedSandboxProvider):
        return provider
    return TimedSandboxProvider(provider, timeout_s)


@dataclass
class _Strike:
    """A sandbox whose call timed out: skipped until ``until`` and while calls run on."""

    until: float
    running: int = 0


class _Strikes:
    """The sandboxes of one provider that recently timed out (module doc)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._strikes: dict[_Key, _Strike] = {}

    def skip_reason(self, key: _Key) -> str | None:
        strike = self._strikes.get(key)
        if strike is None:
            return None
        if strike.running:
            return "an earlier call to it timed out and is still running"
        left = strike.until - time.monotonic()
        if left <= 0:
            del self._strikes[key]
            return None
        return f"a call to it timed out; it is tried again in {left:.1f} s"

    def abandoned(self, key: _Key, task: asyncio.Future[Any]) -> None:
        now = time.monotonic()
        # Entries exist only for sandboxes that timed out; drop those that are over.
        for old in [k for k, s in self._strikes.items() if not s.running and s.until <= now]:
            del self._strikes[old]
        strike = self._strikes.setdefault(key, _Strike(now))
        strike.until = now + self.timeout_s
        strike.running += 1

        def ended(_: object) -> None:
            strike.running -= 1

        task.add_done_callback(ended)


class TimedSandboxProvider:
    """A :class:`~memstrata.sandbox.base.SandboxProvider` whose sandboxes' calls each end
    within ``timeout_s`` (module doc); ``inner`` is the wrapped provider."""

    def __init__(self, inner: SandboxProvider, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be above 0, got {timeout_s!r}")
        self.inner = inner
        self.timeout_s = timeout_s
        self._strikes = _Strikes(timeout_s)

    def __repr__(self) -> str:
        return f"TimedSandboxProvider({self.inner!r}, timeout_s={self.timeout_s})"

    def for_user(self, user_id: str, session_id: str | None = None) -> TimedSandbox:
        started = time.monotonic()
        sandbox = self.inner.for_user(user_id, session_id)
        took = time.monotonic() - started
        if took >= self.timeout_s:
            log_event(
                logger,
                "sandbox.slow_for_user",
                logging.WARNING,
                user_id=user_id,
                session_id=session_id,
                took_s=round(took, 3),
                detail="for_user runs on the event loop and blocks it: connect lazily",
            )
        return TimedSandbox(sandbox, (user_id, session_id), self._strikes)


class TimedSandbox:
    """One sandbox with the deadline; ``case_sensitive`` is the wrapped sandbox's."""

    def __init__(self, inner: Sandbox, key: _Key, strikes: _Strikes) -> None:
        self.inner = inner
        self._key = key
        self._strikes = strikes

    def __repr__(self) -> str:
        return f"TimedSandbox({self.inner!r}, timeout_s={self._strikes.timeout_s})"

    @property
    def case_sensitive(self) -> bool:
        return self.inner.case_sensitive

    async def read_text(self, path: str) -> str | None:
        text: object = await self._call("read_text", path, lambda: self.inner.read_text(path))
        if text is None or isinstance(text, str):
            return text
        raise _wrong_type("read_text", type(text).__name__, "str or None")

    async def write_text(self, path: str, content: str) -> None:
        await self._call("write_text", path, lambda: self.inner.write_text(path, content))

    async def exists(self, path: str) -> bool:
        found: object = await self._call("exists", path, lambda: self.inner.exists(path))
        if isinstance(found, bool):
            return found
        raise _wrong_type("exists", type(found).__name__, "bool")

    async def list(self, prefix: str = "") -> builtins.list[str]:
        paths: object = await self._call("list", prefix, lambda: self.inner.list(prefix))
        if not isinstance(paths, builtins.list):
            raise _wrong_type("list", type(paths).__name__, "a list of str")
        odd = [p for p in paths if not isinstance(p, str)]
        if odd:
            raise _wrong_type("list", f"a list holding {type(odd[0]).__name__}", "a list of str")
        return paths

    async def delete(self, path: str) -> None:
        await self._call("delete", path, lambda: self.inner.delete(path))

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """The wrapped sandbox's ``exclusive()``, if it has one, taken within the deadline
        (module doc); held until the block ends, however long it takes."""
        timeout_s = self._strikes.timeout_s
        lock = exclusive(self.inner)
        try:
            async with asyncio.timeout(timeout_s):
                await lock.__aenter__()
        except TimeoutError:
            raise SandboxError(
                f"the sandbox was not free within {timeout_s:g} s "
                "(MEMSTRATA_SANDBOX_TIMEOUT_S): another process holds its lock"
            ) from None
        try:
            yield
        except BaseException as exc:
            if not await lock.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await lock.__aexit__(None, None, None)

    async def _call(self, operation: str, path: str, call: Callable[[], Awaitable[T]]) -> T:
        timeout_s = self._strikes.timeout_s
        skipped = self._strikes.skip_reason(self._key)
        if skipped is not None:
            raise SandboxError(f"sandbox {operation} of {path!r} skipped: {skipped}")
        started = time.monotonic()
        # A task of its own, so that the caller can stop waiting for a call that ignores
        # its cancellation (asyncio.wait_for would wait for it to end).
        task = asyncio.ensure_future(call())
        task.add_done_callback(_retrieve)
        try:
            await asyncio.wait({task}, timeout=timeout_s)
        except BaseException:
            task.cancel()  # the caller was cancelled: the call is not wanted any more
            raise
        if task.done():
            if task.cancelled():  # by the sandbox itself: a failure, not the caller's cancel
                raise SandboxError(f"sandbox {operation} of {path!r} was cancelled")
            return task.result()
        task.cancel()
        self._strikes.abandoned(self._key, task)
        user_id, session_id = self._key
        task.add_done_callback(
            lambda done: _log_end(done, user_id, session_id, operation, path, started)
        )
        error = SandboxError(
            f"sandbox {operation} of {path!r} did not finish within {timeout_s:g} s "
            "(MEMSTRATA_SANDBOX_TIMEOUT_S) and was abandoned"
        )
        log_failure(
            logger,
            "sandbox.timeout",
            error,
            user_id=user_id,
            session_id=session_id,
            operation=operation,
            path=path,
            timeout_s=timeout_s,
        )
        raise error


def _wrong_type(method: str, got: str, protocol: str) -> SandboxError:
    """A provider's result of another type than the ``Sandbox`` protocol's, refused here so
    that it is a sandbox failure like any other (``sandbox_failed``, the DB kept), not an
    ``AttributeError`` in whichever caller first used it (``write_text`` and ``delete``
    return nothing that is used, so any result of theirs is let through)."""
    return SandboxError(f"{method} returned {got}; a SandboxProvider's {method} returns {protocol}")


def _retrieve(task: asyncio.Future[Any]) -> None:
    # An abandoned call's error has no caller left to raise it to: retrieved here, so no
    # "exception was never retrieved" at exit (a caller still waiting raises it itself).
    if not task.cancelled():
        task.exception()


def _log_end(
    task: asyncio.Future[Any],
    user_id: str,
    session_id: str | None,
    operation: str,
    path: str,
    started: float,
) -> None:
    # Cancelled: it stopped when abandoned (the usual case). Otherwise it ran on, and a
    # write may have landed after memstrata had counted it as failed.
    if task.cancelled():
        outcome, level = "cancelled", logging.DEBUG
    else:
        error = task.exception()
        outcome = "completed" if error is None else describe(error)
        level = logging.INFO
    log_event(
        logger,
        "sandbox.abandoned_ended",
        level,
        user_id=user_id,
        session_id=session_id,
        operation=operation,
        path=path,
        after_s=round(time.monotonic() - started, 3),
        outcome=outcome,
    )
