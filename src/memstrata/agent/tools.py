"""Memory tools for agents: OpenAI function schemas plus plain async callables.

``MemoryTools(ToolContext.bind(user_id, sync, sandbox))`` is bound to one user. Any framework
can register :meth:`MemoryTools.schemas` and route calls to :meth:`MemoryTools.call` (or
to the methods directly). Semantics, argument limits and results are defined in
``docs/AGENT_TOOLS.md``; in short:

* ``record_memory`` appends ``- YYYY-MM-DD: content`` to a ``## section`` of MEMORY.md
  (with ``replaces``, the entry it supersedes is removed);
* ``update_long_term_memory`` replaces one ``## section`` of MEMORY.md (removing entries
  only with ``replace_section``), or the whole file when asked to explicitly
  (``whole_file``);
* ``update_user`` sets ``- key: value`` in a ``## section`` of USER.md, or replaces the
  section's body (removing facts only with ``replace_section``);
* ``memory_search`` (only with a searcher) searches the user's memory and conversations.

Writes go through the sandbox and are synced to the DB at once (spec 4, scenario 2). If
the sandbox cannot be written the edit goes to the DB directly, so a memory is never lost
with the workspace. Nothing raises to the model: bad arguments and failures come back as
short ``error: ...`` strings that say what to do. Every answer is a
:class:`~memstrata.agent.answers.ToolAnswer`: a ``str``, whose ``failed`` says whether the
call stored nothing (MCP's ``isError``). The argument checks are in
:mod:`memstrata.agent.arguments`, the edit each call's arguments make in
:mod:`memstrata.agent.tool_edits`, what each call changes and refuses in
:mod:`memstrata.agent.edits`, the answer texts in :mod:`memstrata.agent.answers`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread

from memstrata.agent.answers import (
    INVALID_ARGUMENTS,
    UNKNOWN_TOOL,
    ToolAnswer,
    could_not_be_saved,
    error,
    invalid,
    part_failure,
    search_text,
    sync_message,
    unreadable,
)
from memstrata.agent.arguments import DEFAULT_TOOL_TOP_K, search_arguments
from memstrata.agent.edits import Edit, NothingToWrite, too_large
from memstrata.agent.schemas import check_arguments, tool_schemas
from memstrata.agent.tool_context import SYNCED_OUTCOMES as SYNCED_OUTCOMES
from memstrata.agent.tool_context import ToolContext as ToolContext
from memstrata.agent.tool_edits import long_term_edit, record_memory_edit, user_edit
from memstrata.agent.tool_log import log_refusal, logged
from memstrata.errors import RuntimeClosedError, SandboxError, ToolInputError
from memstrata.logs import log_failure
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.results import Outcome, SandboxEdit, SyncResult
from memstrata.sandbox.rule import SyncBase, has_content

if TYPE_CHECKING:  # numpy and the retrieval stack load only where a searcher is built
    from memstrata.retrieval.search import SearchService as Searcher

logger = logging.getLogger(__name__)

R = TypeVar("R")


class MemoryTools:
    """The memory tools bound to one user and one sandbox (module doc)."""

    def __init__(
        self,
        ctx: ToolContext,
        *,
        searcher: Searcher | None = None,
        today: Callable[[], date] | None = None,
        log_refusals: bool = True,
    ) -> None:
        # log_refusals off: the transport logs every call itself (MCP's mcp.tool).
        self.ctx = ctx
        self.searcher = searcher
        self._today = today or (lambda: datetime.now(UTC).date())
        self._log_refusals = log_refusals

    def log_failed(self, tool: str, answer: ToolAnswer) -> None:
        if self._log_refusals:
            log_refusal(self.ctx.user_id, tool, answer)

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of the available tools (fresh copies)."""
        return tool_schemas(include_search=self.searcher is not None)

    def callables(self) -> dict[str, Callable[..., Awaitable[ToolAnswer]]]:
        tools: dict[str, Callable[..., Awaitable[ToolAnswer]]] = {
            "record_memory": self.record_memory,
            "update_long_term_memory": self.update_long_term_memory,
            "update_user": self.update_user,
        }
        if self.searcher is not None:
            tools["memory_search"] = self.memory_search
        return tools

    async def call(self, name: str, arguments: object = None) -> ToolAnswer:
        """Run a tool call as a framework delivers it (arguments may be a JSON string).
        Never raises: arguments that are not a JSON object are an ``error:`` answer."""
        tool = self.callables().get(name) if isinstance(name, str) else None
        try:
            if tool is None:
                available = ", ".join(self.callables())
                raise ToolInputError(f"unknown tool {name!r}; available: {available}")
            kwargs = check_arguments(name, arguments)
        except ToolInputError as exc:
            answer = invalid(exc, cause=UNKNOWN_TOOL if tool is None else INVALID_ARGUMENTS)
            self.log_failed(name if isinstance(name, str) else repr(name), answer)
            return answer
        return await tool(**kwargs)  # logs its own failure (tool_log.logged)

    # -- the tools -------------------------------------------------------------------------

    @logged
    async def record_memory(
        self,
        content: str,
        section: str | None = None,
        replaces: str | None = None,
        new_section: bool = False,
    ) -> ToolAnswer:
        try:
            edit = record_memory_edit(content, section, replaces, new_section, self._today())
        except ToolInputError as exc:
            return invalid(exc)
        return await self._edit(edit)

    @logged
    async def update_long_term_memory(
        self,
        content: str,
        section: str | None = None,
        whole_file: bool = False,
        new_section: bool = False,
        replace_section: bool = False,
    ) -> ToolAnswer:
        try:
            # On a worker thread (as the edit itself, _apply): the checks read a whole
            # file's worth of content as Markdown.
            edit = await anyio.to_thread.run_sync(
                partial(
                    long_term_edit,
                    content,
                    section,
                    whole_file,
                    new_section is True,
                    replace_section=replace_section is True,
                    store=self.ctx.sync.store,
                )
            )
        except ToolInputError as exc:
            return invalid(exc)
        return await self._edit(edit)

    @logged
    async def update_user(
        self,
        content: str,
        section: str,
        key: str | None = None,
        replace_section: bool = False,
        new_section: bool = False,
    ) -> ToolAnswer:
        try:
            edit = await anyio.to_thread.run_sync(
                user_edit, content, section, key, replace_section, new_section is True
            )
        except ToolInputError as exc:
            return invalid(exc)
        return await self._edit(edit)

    @logged
    async def memory_search(
        self, query: str, top_k: int = DEFAULT_TOOL_TOP_K, sources: Sequence[str] | None = None
    ) -> ToolAnswer:
        if self.searcher is None:
            return error("memory_search is not available for this agent", cause=UNKNOWN_TOOL)
        try:
            text, top_k, wanted = search_arguments(query, top_k, sources)
        except ToolInputError as exc:
            return invalid(exc)
        search = partial(self.searcher.search, self.ctx.user_id, text, top_k=top_k, sources=wanted)
        try:
            result = await anyio.to_thread.run_sync(search)
        except ValueError as exc:
            return invalid(exc)
        except RuntimeClosedError as exc:
            return part_failure(str(exc), exc)
        except Exception as exc:
            log_failure(logger, "tools.search_failed", exc, user_id=self.ctx.user_id)
            return part_failure(
                "memory search failed; try again, or answer from what you know", exc
            )
        # The MCP tool's text too: a degraded search (BM25 only, a query of symbols) says
        # so in its note: lines, which an agent cannot learn from the hits alone.
        return ToolAnswer(search_text(result.hits, text, result.warnings))

    # -- the write path ----------------------------------------------------------------------

    async def _current(self, kind: FileKind) -> str:
        """The text to edit: the sandbox copy, else the DB copy (else empty)."""
        try:
            text = await self.ctx.sandbox.read_text(kind.filename)
        except Exception:
            text = None
        if text is not None and has_content(text):
            return text
        return await self._stored(kind)

    async def _stored(self, kind: FileKind) -> str:
        stored = await self.ctx.sync.db.get(self.ctx.user_id, kind)
        return "" if stored is None else stored.content

    async def _edit(self, edit: Edit) -> ToolAnswer:
        # The user's sync lock spans the read, the edit, the sandbox write and the read-back,
        # so a concurrent call (MCP clients call tools in parallel) or a frontend edit's
        # mirror cannot slip between them and have one of the two edits overwritten.
        async with self.ctx.sync.user_lock(self.ctx.user_id), AsyncExitStack() as held:
            try:
                # The sandbox's own lock too (where it has one): another process's push
                # landing between this sandbox write and its read-back would erase the
                # entry, and the read-back would still report it stored.
                try:
                    await held.enter_async_context(self.ctx.sync.sandbox_lock(self.ctx.sandbox))
                except SandboxError as exc:  # held elsewhere past the sandbox deadline
                    log_failure(logger, "tools.sandbox_busy", exc, user_id=self.ctx.user_id)
                    return _with_notes(edit, await self._edit_in_db(edit))
                return _with_notes(edit, await self._edit_locked(edit))
            except NothingToWrite as answer:
                return answer.reply
            except RuntimeClosedError as exc:  # never saved, now or later: not "try again"
                return part_failure(f"{edit.kind.filename} was not saved: {exc}", exc)
            except Exception as exc:
                # Sync turns expected failures into results; this is the net for the
                # unexpected, so that nothing ever raises into the agent loop.
                name = edit.kind.filename
                log_failure(logger, "tools.write_failed", exc, user_id=self.ctx.user_id, file=name)
                failed = f"{name} could not be saved ({type(exc).__name__}); try again later"
                return part_failure(failed, exc)

    async def _edit_locked(self, edit: Edit) -> ToolAnswer:
        name = edit.kind.filename
        ctx = self.ctx
        # The read-back rule first: a sandbox copy that only lags behind the DB (another
        # session's or replica's write landed) is refreshed, and an edit of its own is
        # written back. Editing a lagging copy made the new entry clash with the one it
        # lagged behind, and the model was told the user had edited the file.
        try:
            refreshed: SyncResult | None = await ctx.sync.after_controlled_write(
                ctx.user_id, name, ctx.session_id, sandbox=ctx.sandbox, tracker=ctx.tracker
            )
        except Exception as exc:
            log_failure(logger, "tools.refresh_failed", exc, user_id=ctx.user_id, file=name)
            refreshed = None
        if refreshed is not None and not refreshed.needs_retry:
            return await self._edit_in_sandbox(edit, refreshed.base)
        if refreshed is not None and refreshed.outcome is Outcome.DB_UNAVAILABLE:
            if ctx.tracker.is_behind(name):
                # The copy lacks a write the DB holds; an entry added to it now would clash
                # with that write when stored later, and lose.
                return could_not_be_saved(name)
            # Not asked again after the sandbox write: a moment later the answer is the
            # same, and each attempt can wait out the connect timeout (and logs the loss).
            return await self._edit_in_sandbox(edit, None, unreachable=refreshed)
        # The sandbox could not be brought in line with the DB: its copy may lag behind the
        # DB, or hold an edit not stored yet. Writing it could clash with either; the edit
        # goes to the DB alone.
        return await self._edit_in_db(edit)

    async def _edit_in_sandbox(
        self, edit: Edit, base: SyncBase | None, *, unreachable: SyncResult | None = None
    ) -> ToolAnswer:
        """Edit the sandbox copy, write it there and sync it. ``base``: the refresh left
        sandbox and DB both at it (else the copy is read); ``unreachable``: the refresh
        found the DB down, so the copy waits in the sandbox for the round end unsynced."""
        kind, ctx = edit.kind, self.ctx
        name = kind.filename
        if base is not None:
            ctx.tracker.advance_base(name, base, edited=True)  # edited from it alone
            current = base.content
        else:
            try:
                current = await self._current(kind)
            except Exception as exc:
                return unreadable(name, exc)
        new = await self._apply(edit, current)
        try:
            await ctx.sandbox.write_text(name, new)
        except Exception as exc:
            log_failure(logger, "tools.sandbox_write_failed", exc, user_id=ctx.user_id, file=name)
            return await self._store_in_db(edit, SandboxEdit(current, new))
        result = unreachable if unreachable is not None else await ctx.sync_written(name)
        return sync_message(edit.done, result, rounds=ctx.rounds)

    async def _edit_in_db(self, edit: Edit) -> ToolAnswer:
        """Edit without writing the sandbox: its copy, if it can be read and has content
        (with any edit of its own the DB lacks), else the DB copy."""
        kind, ctx = edit.kind, self.ctx
        name = kind.filename
        try:
            text = await ctx.sandbox.read_text(name)
        except Exception as exc:
            if name in ctx.tracker.needs_read_back:
                # The copy holds a change not stored yet, which an edit of the DB copy would
                # clash with when it is read back: better no write than a lost one.
                return unreadable(name, exc)
            text = None
        before = text if text is not None and has_content(text) else None
        try:
            current = before if before is not None else await self._stored(kind)
        except Exception as exc:
            return unreadable(name, exc)
        new = await self._apply(edit, current)
        edited = None if before is None else SandboxEdit(before, new)
        return await self._store_in_db(edit, edited)

    async def _apply(self, edit: Edit, current: str) -> str:
        """The edited text, and the file marked dirty: from here on it is written somewhere.
        Raises :class:`NothingToWrite` when the edit refuses, or the text is unchanged or
        too large."""
        name = edit.kind.filename
        # On a worker thread: an edit reads the whole file as Markdown (its sections,
        # entries and fences), up to a second of CPU for a 256 KB file, which every other
        # request on the event loop would wait for.
        new = await anyio.to_thread.run_sync(edit, current)
        limit = self.ctx.sync.store.max_content_bytes
        size = len(new.encode("utf-8"))
        if size > limit:
            raise NothingToWrite(too_large(edit.kind, size, limit))
        if new == current:
            raise NothingToWrite(ToolAnswer(f"No change: {name} already says that."))
        self.ctx.tracker.mark_dirty(name)
        return new

    async def _store_in_db(self, edit: Edit, edited: SandboxEdit | None) -> ToolAnswer:
        """Store the edit in the DB alone (it runs again there, on the copy the rule picks:
        its answer is that run's)."""
        ctx = self.ctx
        result = await ctx.sync.write_without_sandbox(
            ctx.user_id,
            edit.kind,
            edit,
            edited=edited,
            session_id=ctx.session_id,
            sandbox=ctx.sandbox,
            tracker=ctx.tracker,
        )
        if result.outcome in SYNCED_OUTCOMES:
            # Left dirty on purpose: the round end pushes the DB copy to the sandbox.
            ctx.tracker.fall_behind(edit.kind.filename, result.base)
        return sync_message(edit.done, result, workspace_stale=True, rounds=self.ctx.rounds)


def _with_notes(edit: Edit, reply: ToolAnswer) -> ToolAnswer:
    """``reply`` with the edit's notes (``Edit.answer``), failed for the reply's cause."""
    return reply.like(edit.answer(reply))
