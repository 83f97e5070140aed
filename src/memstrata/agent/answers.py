"""The memory tools' answer texts: what a sync result, an unreadable file or a search hit
tells the model (``docs/AGENT_TOOLS.md``), and whether the call failed (:class:`ToolAnswer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from memstrata.agent.preview import preview
from memstrata.sandbox.results import Outcome, SyncResult

if TYPE_CHECKING:  # numpy and the retrieval stack load only where a searcher is built
    from memstrata.retrieval.ranking import SearchHit

NO_MATCHES = "No matching memories."
# A failed answer's cause (ToolAnswer.cause) where no exception names it.
REFUSED = "refused"  # the edit refused the call's content (an answer says why)
INVALID_ARGUMENTS = "invalid_arguments"
UNKNOWN_TOOL = "unknown_tool"
CONFLICT = "conflict"
REJECTED = "rejected"
STORAGE_UNREACHABLE = "storage_unreachable"
SYNC_FAILED = "sync_failed"
PROTECTED_FILE = "protected_file"  # a guarded file tool's write to AGENTS.md
# How much of a hit's leading context (the previous round's tail) its line shows, at most:
# enough to place the hit in the conversation, well within the preview's 400.
CONTEXT_PREVIEW_CHARS = 120


class ToolAnswer(str):
    """A memory tool's answer: the text the model reads (a plain ``str`` to any agent
    framework) and ``failed``, decided where the text is built. A failed call stored
    nothing the model may count on — an ``error: …``, or an edit that overlapped the
    user's and was not saved — so MCP answers it as ``isError`` without parsing the text.
    A failed answer's ``cause`` (a short code, or an exception's class) and ``part_failed``
    (a part — database, sandbox, embedding — failed, not the caller's input) are for its
    log line (:mod:`memstrata.agent.tool_log`)."""

    failed: bool
    cause: str
    part_failed: bool

    def __new__(
        cls, text: str, *, failed: bool = False, cause: str = REFUSED, part_failed: bool = False
    ) -> ToolAnswer:
        answer = super().__new__(cls, text)
        answer.failed = failed
        answer.cause = cause
        answer.part_failed = part_failed
        return answer

    def like(self, text: str) -> ToolAnswer:
        """``text`` answered as this answer is: failed, for the same cause, or not."""
        return ToolAnswer(text, failed=self.failed, cause=self.cause, part_failed=self.part_failed)


def error(message: str, *, cause: str = REFUSED, part_failed: bool = False) -> ToolAnswer:
    """A failed call's answer: ``error: <message>``; by default the call's own refusal."""
    return ToolAnswer(f"error: {message}", failed=True, cause=cause, part_failed=part_failed)


def invalid(exc: Exception, *, cause: str = INVALID_ARGUMENTS) -> ToolAnswer:
    """A failed call's answer for arguments ``exc`` refused: its message."""
    return error(str(exc), cause=cause)


def part_failure(message: str, exc: BaseException) -> ToolAnswer:
    """A failed call's answer when a part failed with ``exc`` (its class is the cause)."""
    return error(message, cause=type(exc).__name__, part_failed=True)


def unreadable(name: str, exc: Exception) -> ToolAnswer:
    return part_failure(f"{name} cannot be read right now ({type(exc).__name__}); try later", exc)


def sync_message(
    done: str, result: SyncResult, *, workspace_stale: bool = False, rounds: bool = True
) -> ToolAnswer:
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
        return ToolAnswer(f"{done}{version}.{note}")
    if result.outcome is Outcome.MERGED:
        return ToolAnswer(
            f"{done}{version}, merged with an edit the user made at the same time.{note}"
        )
    if result.outcome is Outcome.DB_UNAVAILABLE:
        if workspace_stale:
            return could_not_be_saved(name)
        if not rounds:
            return _not_stored_yet(name, "storage is unreachable", STORAGE_UNREACHABLE)
        # Not failed: the round end stores the sandbox copy.
        return ToolAnswer(
            f"{done} in the workspace; storage is unreachable, it will be saved later."
        )
    if result.outcome is Outcome.CONFLICT:
        # Failed, though no "error:": the user's version won and this edit is not stored.
        return ToolAnswer(
            f"Not saved: the user edited {name} at the same time and the edits overlap. "
            f"Their version was kept ({result.detail}). Read {name} again and reapply "
            "your change if it is still needed.",
            failed=True,
            cause=CONFLICT,
        )
    if result.outcome is Outcome.REJECTED:
        return error(f"{name} was not saved: {result.detail}", cause=REJECTED)
    if result.outcome is Outcome.SANDBOX_FAILED:
        if not rounds:
            return _not_stored_yet(name, "syncing the workspace copy failed", SYNC_FAILED)
        return ToolAnswer(
            f"{done} in the workspace; syncing it failed and is retried at the end of the round."
        )
    return ToolAnswer(f"{done}{version}.")


def could_not_be_saved(name: str) -> ToolAnswer:
    """Neither the sandbox nor the database took the edit: nothing was stored anywhere."""
    return error(
        f"{name} could not be saved: storage is unreachable. Try again later.",
        cause=STORAGE_UNREACHABLE,
        part_failed=True,
    )


def _not_stored_yet(name: str, why: str, cause: str) -> ToolAnswer:
    # An error (MCP: isError), yet not one to repeat: the change is in the sandbox copy,
    # whose read-back at the next call on the file stores it (a repeated record_memory
    # finds its entry there and stores nothing new).
    return error(
        f"{name} is not stored yet: {why}. The change is kept in the workspace copy "
        f"and is stored by the next memory tool call on {name}; do not repeat it.",
        cause=cause,
        part_failed=True,
    )


def format_hit(position: int, hit: SearchHit, query: str) -> str:
    """One hit's line: ``1. [MEMORY.md · 2026-03-01 · score 0.033] <preview>``, the
    preview being the hit's lines that matched the query (:func:`preview`)."""
    when = f" · {hit.created_at.date().isoformat()}"
    text = _marked(hit.text, hit.explain.get("context_chars"), query)
    return f"{position}. [{hit.file_path or 'memory'}{when} · score {hit.score:.3f}] {text}"


def _marked(text: str, context_chars: object, query: str) -> str:
    """A hit's preview, a conversation hit's leading context — the previous round's tail
    (``explain.context_chars``) — on a line of its own as ``(before: …)``, cut to
    ``CONTEXT_PREVIEW_CHARS``. Unmarked, a model read that turn's words as this one's.
    The preview keeps a line whole or leaves it out, so the mark is never cut off."""
    if not isinstance(context_chars, int) or context_chars <= 0:
        return preview(text, query)
    context = preview(text[:context_chars], query, CONTEXT_PREVIEW_CHARS)
    own = text[context_chars:]
    return preview(f"(before: {context})\n{own}" if context else own, query)


def search_text(hits: Sequence[SearchHit], query: str, warnings: Sequence[str] = ()) -> str:
    """A search's answer for the model to read: a line per hit (:func:`format_hit`), or
    ``No matching memories.``; then a ``note:`` line per warning (a degraded search)."""
    lines = [format_hit(i, hit, query) for i, hit in enumerate(hits, start=1)]
    return "\n".join([*(lines or [NO_MATCHES]), *(f"note: {w}" for w in warnings)])
