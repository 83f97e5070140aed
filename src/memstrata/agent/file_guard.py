"""Guarded ``write_file`` / ``edit_file``: the platform's own file tools, made memory-aware.

A platform keeps its file tools; wrapping them with :meth:`GuardedFileTools.wrap` adds
what spec 4 requires of controlled file tools:

* the root AGENTS.md is refused before the tool runs (the platform template owns it);
  the model gets the :class:`~memstrata.errors.ProtectedFileError` message as the result
  (logged as ``agent.tool.refused``, :mod:`memstrata.agent.tool_log`);
* a write that targets a root memory file marks the round tracker dirty, and after the
  tool succeeds the file is synced to the DB at once (scenario 2);
* when that sync did not store the write (conflict, DB unreachable, ...), a short note is
  appended to a string result so the model knows;
* a root file whose name only looks like a memory file's (``memory.md`` on a
  case-sensitive sandbox, ``MEMROY.md``, ``agents.md``: :mod:`memstrata.sandbox.lookalike`)
  is written untouched — it is the platform's file, not memory — and a string result gets
  a ``note:`` line naming the memory file (:func:`lookalike_note`), or the agent would
  believe it had saved a memory.

The target is the ``path`` / ``file_path`` / ``filename`` argument, or the first positional
argument, resolved by the round tracker the way the sandbox resolves paths (``./USER.md``,
``/workspace/USER.md``; case as the sandbox treats it). The wrapped tool's own exceptions
propagate unchanged: the platform's tool keeps its own error contract.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from memstrata.agent.answers import PROTECTED_FILE, error, sync_message
from memstrata.agent.tool_context import ToolContext
from memstrata.agent.tool_log import log_refusal
from memstrata.errors import ProtectedFileError, SandboxError, SandboxPathError
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.base import check_agent_write, normalise_sandbox_path
from memstrata.sandbox.dirty import RoundTracker, target_path
from memstrata.sandbox.lookalike import lookalike_memory_file
from memstrata.sandbox.results import WARNING_OUTCOMES

R = TypeVar("R")


class GuardedFileTools:
    """Wraps file tools for one user's sandbox (module doc)."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    @property
    def case_sensitive(self) -> bool:
        return self.ctx.tracker.case_sensitive

    def wrap(self, inner: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R | str]]:
        ctx = self.ctx
        name = getattr(inner, "__name__", "guarded_file_tool")

        async def guarded(*args: Any, **kwargs: Any) -> R | str:
            path = target_path(kwargs)
            if path is None and args and isinstance(args[0], str):
                path = args[0]
            memory = None if path is None else ctx.tracker.memory_file(path)
            if path is not None and memory == FileKind.AGENTS.filename:
                refused = error(self._refusal(path), cause=PROTECTED_FILE)
                log_refusal(ctx.user_id, name, refused)
                return str(refused)
            if memory is None:
                result = await inner(*args, **kwargs)
                note = None if path is None else lookalike_note(path, ctx.tracker)
                return f"{result}\n{note}" if isinstance(result, str) and note else result
            ctx.tracker.mark_dirty(memory)
            # Held across the platform tool's own read-modify-write and the read-back, as
            # for the memory tools: a frontend edit's mirror waits instead of interleaving.
            # The sandbox's lock too (where it has one), so no other process's push lands
            # between the tool's write and its read-back; held elsewhere past the sandbox
            # deadline, the tool runs without it, as it would on a sandbox with none.
            async with ctx.sync.user_lock(ctx.user_id), AsyncExitStack() as held:
                with contextlib.suppress(SandboxError):
                    await held.enter_async_context(ctx.sync.sandbox_lock(ctx.sandbox))
                return await self._write_through(memory, inner, args, kwargs)

        guarded.__name__ = name
        guarded.__doc__ = getattr(inner, "__doc__", None)
        return guarded

    async def _write_through(
        self,
        memory: str,
        inner: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R | str:
        ctx = self.ctx
        result = await inner(*args, **kwargs)
        synced = await ctx.sync_written(memory)
        if isinstance(result, str) and synced.outcome in WARNING_OUTCOMES:
            return f"{result}\n[memory sync] {sync_message('Written', synced)}"
        return result

    def _refusal(self, path: str) -> str:
        tracker = self.ctx.tracker
        try:
            check_agent_write(
                path,
                case_sensitive=tracker.case_sensitive,
                workspace_prefixes=tracker.workspace_prefixes,
            )
        except ProtectedFileError as exc:
            return str(exc)
        except SandboxPathError:
            pass
        return f"{path} is AGENTS.md, which the platform manages; it cannot be written"


def lookalike_note(path: str, tracker: RoundTracker) -> str | None:
    """The note for a write to ``path`` whose root file name only looks like a memory
    file's on this sandbox (module doc), else ``None``."""
    name = lookalike_memory_file(
        path, case_sensitive=tracker.case_sensitive, workspace_prefixes=tracker.workspace_prefixes
    )
    if name is None:
        return None
    written = normalise_sandbox_path(path, tracker.workspace_prefixes) or path
    case_only = written.casefold() == name.casefold()
    why = "names are case-sensitive" if case_only else "check the spelling"
    if name == FileKind.AGENTS.filename:
        return (
            f"note: {written} is not {name}, the platform's read-only rules ({why}); "
            f"put what you want to keep in {FileKind.MEMORY.filename}"
        )
    return f"note: {written} is not your memory file; {name} is ({why})"
