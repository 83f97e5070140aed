"""Opening an agent session: sync the sandbox, start dirty tracking, build the prompt.

:func:`open_agent_session` is the one call a platform makes when it creates an agent for
a user's new session (spec 4, scenario 4 + 5):

1. ``sync.start_session`` — sandbox-first sync of SOUL/USER/MEMORY, AGENTS.md from the
   template (and provisioning for a brand-new user);
2. ``sync.begin_round`` — a :class:`~memstrata.sandbox.dirty.RoundTracker` holding the DB
   versions the first round starts from;
3. the system prompt from the DB copies (:func:`build_memory_prompt`), after step 1 so an
   edit left in the sandbox is already in it;
4. the memory tools and guarded file tools bound to this user and sandbox.

The agent loop then calls :meth:`AgentSession.on_tool_call` per tool call and
:meth:`AgentSession.end_round` per round.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio.to_thread

from memstrata.agent.file_guard import GuardedFileTools
from memstrata.agent.prompt import PromptResult, build_system_prompt, check_token_limit
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.config import PROMPT_BUDGET_RATIO
from memstrata.config_search import PROMPT_FLOOR_SHARE
from memstrata.logs import log_event, log_failure
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.session_ids import check_session_id
from memstrata.retrieval.tokenize import count_tokens
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.dirty import RoundTracker
from memstrata.sandbox.reconcile import DB_ERRORS
from memstrata.sandbox.results import open_sandbox
from memstrata.sandbox.sync import SyncResult, SyncService

if TYPE_CHECKING:
    from memstrata.retrieval.search import SearchService

logger = logging.getLogger(__name__)


async def build_memory_prompt(
    store: MemoryStore,
    user_id: str,
    *,
    token_limit: int,
    ratio: float = PROMPT_BUDGET_RATIO,
    count: Callable[[str], int] = count_tokens,
    sandbox: Sandbox | None = None,
    guide: str | None = None,
    floor_share: float = PROMPT_FLOOR_SHARE,
) -> PromptResult:
    """AGENTS.md (platform template) + the user's SOUL / USER / MEMORY from the DB, fitted
    into ``floor(ratio × token_limit)`` tokens by ``build_system_prompt``; ``floor_share``
    above 0 opts in to its floors (the default is the spec's strict priority order).

    ``guide``: a host's own words on reaching memory, which lead the prompt in place of
    AGENTS.md — the rules of the platform's workspace agents, which an agent without that
    workspace (an MCP client: ``mcp.prompt_guide``) would misread.

    With the DB unreachable and a ``sandbox`` given, the sandbox copies are used instead
    (the agent works from them anyway) and a warning is logged; without a sandbox the DB
    error propagates. ``count`` must be the chunker's counter so budgets agree; it is
    called on a worker thread.
    """
    try:
        files = await anyio.to_thread.run_sync(store.list_memory_files, user_id)
        contents: Mapping[FileKind, str] = {f.kind: f.content for f in files}
    except DB_ERRORS as exc:
        if sandbox is None:
            raise
        log_failure(logger, "prompt.from_sandbox", exc, user_id=user_id)
        contents = {k: await _read_or_empty(sandbox, k.filename) for k in USER_FILE_KINDS}

    def build() -> PromptResult:
        return build_system_prompt(
            agents_md=store.templates.agents_md() if guide is None else "",
            guide=guide or "",
            soul=contents.get(FileKind.SOUL, ""),
            user=contents.get(FileKind.USER, ""),
            memory=contents.get(FileKind.MEMORY, ""),
            token_limit=token_limit,
            count=count,
            ratio=ratio,
            floor_share=floor_share,
        )

    # Off the event loop: cutting a 256 KB file to the budget reads it as Markdown and
    # counts it, 0.1-0.5 s of CPU that every other request on the loop would wait for.
    return await anyio.to_thread.run_sync(build)


async def _read_or_empty(sandbox: Sandbox, path: str) -> str:
    try:
        return await sandbox.read_text(path) or ""
    except Exception:
        return ""


@dataclass
class AgentSession:
    """Everything one agent session needs from memstrata (module doc)."""

    ctx: ToolContext
    tools: MemoryTools
    file_tools: GuardedFileTools
    prompt: PromptResult
    start_results: list[SyncResult]

    @property
    def tracker(self) -> RoundTracker:
        return self.ctx.tracker

    def on_tool_call(self, name: str, arguments: object = None, *, guarded: bool = False) -> None:
        """Dirty tracking for every tool call; never raises, whatever the arguments are.
        ``guarded``: the call went through ``file_tools.wrap``, which synced its write
        already, so it is not read back (``RoundTracker.on_tool_call``)."""
        self.ctx.tracker.on_tool_call(name, arguments, guarded=guarded)

    async def end_round(self) -> list[SyncResult]:
        results = await self.ctx.sync.end_round(self.ctx.tracker)
        # Where the read-back left each copy: the round-start snapshot the tracker now holds
        # is the DB's copy, which loses to an older base record whose write failed.
        for result in results:
            if result.base is not None:
                self.ctx.tracker.advance_base(result.filename, result.base)
        return results

    def close(self) -> None:
        """Stop receiving frontend pushes for this session's sandbox. Idempotent; a
        session nothing refers to any more is closed when it is collected, so a host
        that forgets this call does not leave every later edit mirrored to it."""
        self._closer()

    def __post_init__(self) -> None:
        # On the context, which the tools share: a host may keep only ``session.tools``.
        # A session on the user's own sandbox (no id) ends too: while it is open, a later
        # start there keeps the copies its agent may have read (``SyncService.start_session``).
        self._closer: Callable[[], object] = weakref.finalize(
            self.ctx, self.ctx.sync.end_session, self.ctx.user_id, self.ctx.session_id
        )


async def open_agent_session(
    sync: SyncService,
    user_id: str,
    *,
    token_limit: int,
    ratio: float = PROMPT_BUDGET_RATIO,
    session_id: str | None = None,
    searcher: SearchService | None = None,
    count: Callable[[str], int] = count_tokens,
    floor_share: float = PROMPT_FLOOR_SHARE,
) -> AgentSession:
    """Sync, track, prompt and tools for a new session (module doc). ``session_id``: None
    (the user's own sandbox) or a conversation's id under ``SESSION_ID_RULE``; else
    ``InvalidSessionIdError`` (an ``InvalidContentError``)."""
    # Before the sync: a bad argument changes nothing (a bad session id would open a
    # sandbox that fails every call and be registered for frontend pushes).
    check_token_limit(token_limit)
    if session_id is not None:
        check_session_id(session_id)
    results = await sync.start_session(user_id, session_id)
    try:
        # A provider that raises must not stop the session (spec 5: a sandbox failure is a
        # warning): the stand-in fails every call, so the tools write the DB directly.
        sandbox = open_sandbox(sync.sandboxes, user_id, session_id)
        tracker = await sync.begin_round(user_id, session_id, sandbox=sandbox)
        prompt = await build_memory_prompt(
            sync.store,
            user_id,
            token_limit=token_limit,
            ratio=ratio,
            count=count,
            sandbox=sandbox,
            floor_share=floor_share,
        )
    except BaseException:
        # Cancelled or failed before the AgentSession (whose close ends it) existed: the
        # session id would otherwise stay open, receiving every later frontend edit.
        sync.end_session(user_id, session_id)
        raise
    ctx = ToolContext(user_id, sync, sandbox, session_id, tracker)
    log_event(
        logger,
        "agent.session_opened",
        user_id=user_id,
        session_id=session_id,
        prompt_tokens=prompt.tokens,
        budget=prompt.budget,
        truncated=list(prompt.truncated),
        dropped=list(prompt.dropped),
    )
    return AgentSession(
        ctx, MemoryTools(ctx, searcher=searcher), GuardedFileTools(ctx), prompt, results
    )
