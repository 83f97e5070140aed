"""Memory tools for agents: OpenAI function schemas plus plain async callables.

``MemoryTools(ToolContext.bind(user_id, sync, sandbox))`` is bound to one user. Any framework
can register :meth:`MemoryTools.schemas` and route calls to :meth:`MemoryTools.call` (or
to the methods directly). Semantics, argument limits and results are defined in
``docs/AGENT_TOOLS.md``; in short:

* ``record_memory`` appends ``- YYYY-MM-DD: content`` to a ``## section`` of MEMORY.md;
* ``update_long_term_memory`` replaces one ``## section`` of MEMORY.md, or the whole file;
* ``update_user`` sets ``- key: value`` in a ``## section`` of USER.md, or replaces it;
* ``memory_search`` (only with a searcher) searches the user's memory and conversations.

Writes go through the sandbox and are synced to the DB at once (spec 4, scenario 2). If
the sandbox cannot be written the edit goes to the DB directly, so a memory is never lost
with the workspace. Nothing raises to the model: bad arguments and failures come back as
short ``error: ...`` strings that say what to do.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread

from memstrata.agent import sections
from memstrata.agent.schemas import check_arguments, tool_schemas
from memstrata.errors import ToolInputError
from memstrata.logs import log_failure
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.limits import MAX_TOOL_QUERY_CHARS, MAX_TOOL_TOP_K, SOURCES
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.dirty import RoundTracker
from memstrata.sandbox.reconcile import Outcome, SandboxEdit, SyncResult
from memstrata.sandbox.rule import SyncBase, has_content
from memstrata.sandbox.sync import SyncService
from memstrata.text import lone_surrogate_at

if TYPE_CHECKING:  # numpy and the retrieval stack load only where a searcher is built
    from memstrata.retrieval.ranking import SearchHit
    from memstrata.retrieval.search import SearchService as Searcher

logger = logging.getLogger(__name__)

R = TypeVar("R")

MAX_ENTRY_CHARS = 2000
MAX_NAME_CHARS = 80
MAX_VALUE_CHARS = 500
HIT_PREVIEW_CHARS = 400
# A controlled write that left the DB equal to the sandbox: no round-end read-back needed.
SYNCED_OUTCOMES = frozenset({Outcome.WRITTEN, Outcome.UNCHANGED, Outcome.MERGED})


def _name(value: object, what: str, example: str = "Decisions") -> str:
    if not isinstance(value, str) or not value.strip().lstrip("#").strip():
        raise ToolInputError(f"{what} must be a non-empty string such as {example!r}")
    name = value.strip().lstrip("#").strip()
    if "\n" in name or len(name) > MAX_NAME_CHARS:
        raise ToolInputError(f"{what} must be one line of at most {MAX_NAME_CHARS} characters")
    return name


def _text(value: object, what: str, limit: int | None = None, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise ToolInputError(f"{what} must be a string")
    if not empty_ok and not value.strip():
        raise ToolInputError(f"{what} must not be empty")
    if "\x00" in value:
        raise ToolInputError(f"{what} must not contain NUL characters")
    if (at := lone_surrogate_at(value)) is not None:
        raise ToolInputError(f"{what} is not valid Unicode (a lone surrogate at character {at})")
    if limit is not None and len(value) > limit:
        raise ToolInputError(f"{what} is {len(value)} characters; the limit is {limit}")
    return value


def search_arguments(
    query: object, top_k: object = 5, sources: object = None
) -> tuple[str, int, list[str] | None]:
    """``memory_search``'s argument limits (also the MCP tool's): query, top_k, sources."""
    text = _text(query, "query", MAX_TOOL_QUERY_CHARS)
    if type(top_k) is not int or not 1 <= top_k <= MAX_TOOL_TOP_K:  # bool is no int here
        raise ToolInputError(f"top_k must be an integer from 1 to {MAX_TOOL_TOP_K}")
    try:
        wanted = None if sources is None else list(sources)  # type: ignore[call-overload]
    except TypeError as exc:
        raise ToolInputError(f"sources must be a non-empty list of {SOURCES}") from exc
    if wanted is not None and (not wanted or any(s not in SOURCES for s in wanted)):
        raise ToolInputError(f"sources must be a non-empty list of {SOURCES}")
    return text, top_k, wanted


@dataclass(frozen=True)
class ToolContext:
    """What every tool of one session is bound to. ``tracker`` is the round's one owner
    of dirty flags and of the sandbox's path rules (case, workspace prefixes)."""

    user_id: str
    sync: SyncService
    sandbox: Sandbox
    session_id: str | None
    tracker: RoundTracker
    # Whether a round end or session start follows that reads the sandbox copy back. MCP
    # clients call tools with no rounds: an edit left in the sandbox copy is stored only
    # by a later call, so the answer must not promise "it will be saved later".
    rounds: bool = True

    @classmethod
    def bind(
        cls,
        user_id: str,
        sync: SyncService,
        sandbox: Sandbox,
        *,
        session_id: str | None = None,
        tracker: RoundTracker | None = None,
        rounds: bool = True,
    ) -> ToolContext:
        """A context; without a ``tracker`` the tools keep their own for this sandbox."""
        if tracker is None:
            tracker = RoundTracker(user_id, session_id, case_sensitive=sandbox.case_sensitive)
        return cls(user_id, sync, sandbox, session_id, tracker, rounds)


class MemoryTools:
    """The memory tools bound to one user and one sandbox (module doc)."""

    def __init__(
        self,
        ctx: ToolContext,
        *,
        searcher: Searcher | None = None,
        today: Callable[[], date] | None = None,
    ) -> None:
        self.ctx = ctx
        self.searcher = searcher
        self._today = today or (lambda: datetime.now(UTC).date())

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of the available tools (fresh copies)."""
        return tool_schemas(include_search=self.searcher is not None)

    def callables(self) -> dict[str, Callable[..., Awaitable[str]]]:
        tools: dict[str, Callable[..., Awaitable[str]]] = {
            "record_memory": self.record_memory,
            "update_long_term_memory": self.update_long_term_memory,
            "update_user": self.update_user,
        }
        if self.searcher is not None:
            tools["memory_search"] = self.memory_search
        return tools

    async def call(self, name: str, arguments: object = None) -> str:
        """Run a tool call as a framework delivers it (arguments may be a JSON string).
        Never raises: arguments that are not a JSON object are an ``error:`` answer."""
        tool = self.callables().get(name) if isinstance(name, str) else None
        if tool is None:
            return f"error: unknown tool {name!r}; available: {', '.join(self.callables())}"
        try:
            kwargs = check_arguments(name, arguments)
        except ToolInputError as exc:
            return f"error: {exc}"
        return await tool(**kwargs)

    # -- the tools -------------------------------------------------------------------------

    async def record_memory(self, content: str, section: str = "Notes") -> str:
        try:
            entry = sections.dated_bullet(_text(content, "content", MAX_ENTRY_CHARS), self._today())
            name = _name(section, "section")
        except ToolInputError as exc:
            return f"error: {exc}"
        edit = partial(sections.append_to_section, name=name, entry=entry)
        return await self._edit(FileKind.MEMORY, edit, f"Recorded in MEMORY.md under ## {name}")

    async def update_long_term_memory(self, content: str, section: str | None = None) -> str:
        try:
            if section is None:
                text = _text(content, "content (the whole new MEMORY.md)")
                body = text if text.endswith("\n") else text + "\n"
                edit: Callable[[str], str] = partial(_replace_all, body=body)
                done = "Replaced the whole of MEMORY.md"
            else:
                name = _name(section, "section")
                text = _text(content, "content", empty_ok=True)
                edit = partial(sections.replace_section, name=name, body=text)
                done = f"Replaced ## {name} in MEMORY.md"
        except ToolInputError as exc:
            return f"error: {exc}"
        return await self._edit(FileKind.MEMORY, edit, done)

    async def update_user(self, content: str, section: str, key: str | None = None) -> str:
        try:
            name = _name(section, "section")
            if key is None:
                body = _text(content, "content", empty_ok=True)
                edit = partial(sections.replace_section, name=name, body=body)
                done = f"Replaced ## {name} in USER.md"
            else:
                label = _name(key, "key", "Time zone")
                if ":" in label:
                    raise ToolInputError("key must not contain ':'")
                value = _text(content, "content", MAX_VALUE_CHARS, empty_ok=True)
                if "\n" in value.strip():
                    raise ToolInputError("content must be one line when a key is given")
                edit = partial(sections.set_key, name=name, key=label, value=value.strip())
                done = f"Set {label} under ## {name} in USER.md"
        except ToolInputError as exc:
            return f"error: {exc}"
        return await self._edit(FileKind.USER, edit, done)

    async def memory_search(
        self, query: str, top_k: int = 5, sources: Sequence[str] | None = None
    ) -> str:
        if self.searcher is None:
            return "error: memory_search is not available for this agent"
        try:
            text, top_k, wanted = search_arguments(query, top_k, sources)
        except ToolInputError as exc:
            return f"error: {exc}"
        search = partial(self.searcher.search, self.ctx.user_id, text, top_k=top_k, sources=wanted)
        try:
            result = await anyio.to_thread.run_sync(search)
        except ValueError as exc:
            return f"error: {exc}"
        except Exception as exc:
            log_failure(logger, "tools.search_failed", exc, user_id=self.ctx.user_id)
            return "error: memory search failed; try again, or answer from what you know"
        if not result.hits:
            return "No matching memories."
        hits = [_format_hit(i, hit, text) for i, hit in enumerate(result.hits, start=1)]
        return "\n".join(hits)

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

    async def _edit(self, kind: FileKind, edit: Callable[[str], str], done: str) -> str:
        # The user's sync lock spans the read, the edit, the sandbox write and the read-back,
        # so a concurrent call (MCP clients call tools in parallel) or a frontend edit's
        # mirror cannot slip between them and have one of the two edits overwritten.
        async with self.ctx.sync.user_lock(self.ctx.user_id):
            try:
                return await self._edit_locked(kind, edit, done)
            except _NothingToWrite as answer:
                return answer.reply
            except Exception as exc:
                # Sync turns expected failures into results; this is the net for the
                # unexpected, so that nothing ever raises into the agent loop.
                name = kind.filename
                log_failure(logger, "tools.write_failed", exc, user_id=self.ctx.user_id, file=name)
                return f"error: {name} could not be saved ({type(exc).__name__}); try again later"

    async def _edit_locked(self, kind: FileKind, edit: Callable[[str], str], done: str) -> str:
        name = kind.filename
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
            return await self._edit_in_sandbox(kind, edit, done, refreshed.base)
        if refreshed is not None and refreshed.outcome is Outcome.DB_UNAVAILABLE:
            if ctx.tracker.is_behind(name):
                # The copy lacks a write the DB holds; an entry added to it now would clash
                # with that write when stored later, and lose.
                return f"error: {name} could not be saved: storage is unreachable. Try again later."
            return await self._edit_in_sandbox(kind, edit, done, None)
        # The sandbox could not be brought in line with the DB: its copy may lag behind the
        # DB, or hold an edit not stored yet. Writing it could clash with either; the edit
        # goes to the DB alone.
        return await self._edit_in_db(kind, edit, done)

    async def _edit_in_sandbox(
        self, kind: FileKind, edit: Callable[[str], str], done: str, base: SyncBase | None
    ) -> str:
        """Edit the sandbox copy, write it there and sync it. ``base``: the refresh left
        sandbox and DB both at it (else the copy is read)."""
        name, ctx = kind.filename, self.ctx
        if base is not None:
            ctx.tracker.advance_base(name, base)
            current = base.content
        else:
            try:
                current = await self._current(kind)
            except Exception as exc:
                return _unreadable(name, exc)
        new = self._apply(kind, edit, current)
        try:
            await ctx.sandbox.write_text(name, new)
        except Exception as exc:
            log_failure(logger, "tools.sandbox_write_failed", exc, user_id=ctx.user_id, file=name)
            return await self._store_in_db(kind, edit, SandboxEdit(current, new), done)
        result = await ctx.sync.after_controlled_write(
            ctx.user_id, name, ctx.session_id, sandbox=ctx.sandbox, tracker=ctx.tracker
        )
        if result.outcome in SYNCED_OUTCOMES:
            ctx.tracker.mark_synced(name)
        if result.base is not None:
            ctx.tracker.advance_base(name, result.base)
        return sync_message(done, result, rounds=ctx.rounds)

    async def _edit_in_db(self, kind: FileKind, edit: Callable[[str], str], done: str) -> str:
        """Edit without writing the sandbox: its copy, if it can be read and has content
        (with any edit of its own the DB lacks), else the DB copy."""
        name, ctx = kind.filename, self.ctx
        try:
            text = await ctx.sandbox.read_text(name)
        except Exception as exc:
            if name in ctx.tracker.needs_read_back:
                # The copy holds a change not stored yet, which an edit of the DB copy would
                # clash with when it is read back: better no write than a lost one.
                return _unreadable(name, exc)
            text = None
        before = text if text is not None and has_content(text) else None
        try:
            current = before if before is not None else await self._stored(kind)
        except Exception as exc:
            return _unreadable(name, exc)
        new = self._apply(kind, edit, current)
        edited = None if before is None else SandboxEdit(before, new)
        return await self._store_in_db(kind, edit, edited, done)

    def _apply(self, kind: FileKind, edit: Callable[[str], str], current: str) -> str:
        """The edited text, and the file marked dirty: from here on it is written somewhere.
        Raises :class:`_NothingToWrite` when it is unchanged or too large."""
        name = kind.filename
        new = edit(current)
        limit = self.ctx.sync.store.max_content_bytes
        size = len(new.encode("utf-8"))
        if size > limit:
            raise _NothingToWrite(
                f"error: {name} would be {size} bytes, over the {limit}-byte limit; "
                "remove outdated entries with update_long_term_memory first"
            )
        if new == current:
            raise _NothingToWrite(f"No change: {name} already says that.")
        self.ctx.tracker.mark_dirty(name)
        return new

    async def _store_in_db(
        self,
        kind: FileKind,
        edit: Callable[[str], str],
        edited: SandboxEdit | None,
        done: str,
    ) -> str:
        ctx = self.ctx
        result = await ctx.sync.write_without_sandbox(
            ctx.user_id,
            kind,
            edit,
            edited=edited,
            session_id=ctx.session_id,
            sandbox=ctx.sandbox,
            tracker=ctx.tracker,
        )
        if result.outcome in SYNCED_OUTCOMES:
            # Left dirty on purpose: the round end pushes the DB copy to the sandbox.
            ctx.tracker.fall_behind(kind.filename, result.base)
        return sync_message(done, result, workspace_stale=True, rounds=self.ctx.rounds)


class _NothingToWrite(Exception):
    """An edit that writes nothing: ``reply`` is the tool's answer."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


def _unreadable(name: str, exc: Exception) -> str:
    return f"error: {name} cannot be read right now ({type(exc).__name__}); try later"


def _replace_all(_old: str, body: str) -> str:
    return body


def sync_message(
    done: str, result: SyncResult, *, workspace_stale: bool = False, rounds: bool = True
) -> str:
    """The tool's answer for a sync ``result``. ``rounds`` (``ToolContext.rounds``): a
    round end will read the sandbox copy back; without one (MCP), an edit the DB did not
    get is an ``error:`` to retry, since the retry's read-back stores the copy."""
    name = result.filename
    version = "" if result.version is None else f" (version {result.version})"
    note = (
        " The workspace copy could not be updated; it is refreshed next session."
        if workspace_stale
        else ""
    )
    if result.outcome in (Outcome.WRITTEN, Outcome.UNCHANGED):
        return f"{done}{version}.{note}"
    if result.outcome is Outcome.MERGED:
        return f"{done}{version}, merged with an edit the user made at the same time.{note}"
    if result.outcome is Outcome.DB_UNAVAILABLE:
        if workspace_stale:
            return f"error: {name} could not be saved: storage is unreachable. Try again later."
        if not rounds:
            return _not_stored_yet(name, "storage is unreachable")
        return f"{done} in the workspace; storage is unreachable, it will be saved later."
    if result.outcome is Outcome.CONFLICT:
        return (
            f"Not saved: the user edited {name} at the same time and the edits overlap. "
            f"Their version was kept ({result.detail}). Read {name} again and reapply "
            "your change if it is still needed."
        )
    if result.outcome is Outcome.REJECTED:
        return f"error: {name} was not saved: {result.detail}"
    if result.outcome is Outcome.SANDBOX_FAILED:
        if not rounds:
            return _not_stored_yet(name, "syncing the workspace copy failed")
        return f"{done} in the workspace; syncing it failed and is retried at the end of the round."
    return f"{done}{version}."


def _not_stored_yet(name: str, why: str) -> str:
    # An error (MCP: isError), yet not one to repeat: the change is in the sandbox copy,
    # whose read-back at the next call on the file stores it; repeating record_memory
    # would store it twice.
    return (
        f"error: {name} is not stored yet: {why}. The change is kept in the workspace copy "
        f"and is stored by the next memory tool call on {name}; do not repeat it."
    )


def _format_hit(position: int, hit: SearchHit, query: str) -> str:
    when = f" · {hit.created_at.date().isoformat()}"
    text = _preview(" ".join(hit.text.split()), query)
    return f"{position}. [{hit.file_path or 'memory'}{when} · score {hit.score:.3f}] {text}"


def _preview(text: str, query: str, limit: int = HIT_PREVIEW_CHARS) -> str:
    """At most ``limit`` characters of ``text``, around the first query word it contains.

    A memory-file chunk can run to 512 tokens; its first lines are usually headings, so a
    plain prefix would often hide exactly the line that matched.
    """
    if len(text) <= limit:
        return text
    folded = text.casefold()
    found = [folded.find(w.casefold()) for w in re.findall(r"\w+", query)]
    hits = [p for p in found if p >= 0]
    start = max(0, min(hits) - limit // 4) if hits else 0
    start = min(start, len(text) - limit)
    window = text[start : start + limit]
    return ("…" if start else "") + window + ("…" if start + limit < len(text) else "")
