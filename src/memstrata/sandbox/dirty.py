"""Per-round dirty tracking: which memory files an agent may have changed this round.

The agent loop calls :meth:`RoundTracker.on_tool_call` for every tool call and
``await sync.end_round(tracker)`` when the round ends (spec 4, "dirty-flag detection and
fallback"). A file becomes dirty when

* a memory tool ran: ``record_memory`` / ``update_long_term_memory`` touch MEMORY.md,
  ``update_user`` touches USER.md;
* a ``write_file`` / ``edit_file`` call targets a root memory file; the target is read
  from the ``path``, ``file_path`` or ``filename`` argument and normalised the way the
  sandbox resolves it (``./USER.md`` and ``/workspace/USER.md`` are ``USER.md``; on a
  case-insensitive sandbox ``user.md`` is too).

A host reports a call of a file tool wrapped by
:class:`~memstrata.agent.file_guard.GuardedFileTools` with ``guarded=True``: the guard
marked the file itself, and synced when the write was stored, so the report, often sent
after the call ran, is that write, as the report of a memory tool is; it keeps the sync and
the round end reads nothing back. Without it (``guarded`` defaults to False) a
``write_file`` / ``edit_file`` is taken as unguarded and marks its file for read-back.

Marking is deliberately generous: a false positive costs one read-back that finds nothing
changed, a false negative loses an edit until the next session. A write that targets the
root AGENTS.md sets :attr:`RoundTracker.agents_touched` so the round end restores the
template. Shell edits cannot be seen (the spec's documented blind spot), but a file a shell
removed can: any other tool call (a shell, a script, a move tool) sets
:attr:`RoundTracker.unseen_tool`, and the round end then asks the sandbox whether each
synced file is still there (:func:`mark_missing`); a missing one is read back, which
restores it and names a lookalike left beside it (``mv MEMORY.md memory.md``,
:mod:`memstrata.sandbox.lookalike`). A round of memory tools, memstrata's other tools,
which move no file (:data:`NO_FILE_TOOLS`: the read-only ``memory_search``,
``memory_read``, ``skills_list``, and ``memory_write``, ``skill_set``,
``conversation_index_turn``) and named file writes costs no sandbox call.

The tracker also remembers each file's DB version and content when the round started: the
base that the round-end read-back writes against (``expected_version``) and merges from
when a human edited the same file meanwhile (see :mod:`memstrata.sandbox.sync`). A
controlled write that settled a file replaces it with a :class:`SeenBase`, which outranks
a stale base record in the sandbox (:func:`memstrata.sandbox.results.choose_base`).

A tracker also collects the results of syncs not its own that settled its sandbox's copy
this round — a frontend edit's mirror that merged the agent's edit or kept it aside
(:meth:`RoundTracker.notice`, :mod:`memstrata.sandbox.notices`) — for the round end to report.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memstrata.errors import ToolInputError
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.sandbox.base import DEFAULT_WORKSPACE_PREFIXES, Sandbox, root_memory_file
from memstrata.sandbox.rule import SyncBase

if TYPE_CHECKING:  # results imports this module (SeenBase)
    from memstrata.sandbox.results import SyncResult

TOOL_FILES: Mapping[str, str] = {
    "record_memory": FileKind.MEMORY.filename,
    "update_long_term_memory": FileKind.MEMORY.filename,
    "update_user": FileKind.USER.filename,
}
# Memstrata's own agent tools that read and move no file (the MCP tools annotated
# read-only): memstrata knows what they do, so they are no unseen tool.
READ_ONLY_TOOLS = frozenset({"memory_search", "memory_read", "skills_list"})
# Memstrata's own tools that write but move no sandbox file themselves, so they are no
# unseen tool either: ``memory_write`` stores through a person's write path (its mirror
# pushes the file under the sync rules and tells this round's trackers what it settled),
# ``skill_set`` and ``conversation_index_turn`` write database rows only.
NO_FILE_TOOLS = READ_ONLY_TOOLS | {"memory_write", "skill_set", "conversation_index_turn"}
FILE_TOOLS = frozenset({"write_file", "edit_file"})
PATH_ARGUMENTS = ("path", "file_path", "filename")
SYNCED_FILES = frozenset(kind.filename for kind in USER_FILE_KINDS)
# Notices a tracker keeps for its round end, the newest: a host that never ends a round
# must not make a long session's tracker grow with every frontend edit.
MAX_NOTICES = 32


def decode_tool_arguments(arguments: object) -> dict[str, object]:
    """Tool-call arguments as a dict; OpenAI delivers them as a JSON string. The one
    decoder: strict, so a tool can tell the model what is wrong (``ToolInputError``).

    Typed ``object`` because an agent loop passes on whatever the model produced: a list
    (``["billing"]``, or ``[["content", "x"]]``, which ``dict()`` would quietly accept) or a
    number is refused like a JSON array, never raised as ``TypeError``/``ValueError``.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise ToolInputError(f"arguments are not valid JSON ({exc.args[0]})") from exc
    # JSON object keys are strings; a Mapping with others is no JSON object either.
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        raise ToolInputError("arguments must be a JSON object")
    return dict(arguments)


def target_path(arguments: object) -> str | None:
    """The file a ``write_file`` / ``edit_file`` call targets, if it names one.

    Unparsable arguments name no file: the tracker must never break the agent loop.
    """
    try:
        args = decode_tool_arguments(arguments)
    except ToolInputError:
        return None
    for key in PATH_ARGUMENTS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


@dataclass(frozen=True)
class SeenBase(SyncBase):
    """Where this session last saw its sandbox copy settle (a controlled write or a
    read-back that left it equal to the DB, or a DB-only write that carried its text): it
    outranks a base record that is not newer, whose write may have failed."""


@dataclass(frozen=True)
class EditedBase(SeenBase):
    """The copy this session's memory tool is editing, read under the lock right after its
    sync (``advance_base(..., edited=True)``): the tool's write is from it alone, never
    from an older copy the record names (``results.choose_base``)."""


class RoundTracker:
    """Dirty flags and base versions for one user's sandbox, round after round.

    ``case_sensitive`` must describe the sandbox's file system. It defaults to ``False``
    because an unknown sandbox is safer treated as case-insensitive: ``memory.md`` then
    marks MEMORY.md dirty, which at worst costs a read-back.
    """

    def __init__(
        self,
        user_id: str,
        session_id: str | None = None,
        *,
        bases: Mapping[str, SyncBase] | None = None,
        case_sensitive: bool = False,
        workspace_prefixes: Sequence[str] = DEFAULT_WORKSPACE_PREFIXES,
    ) -> None:
        self.user_id = user_id
        self.session_id = session_id
        self.case_sensitive = case_sensitive
        self.workspace_prefixes = tuple(workspace_prefixes)
        self._bases: dict[str, SyncBase] = dict(bases or {})
        self._dirty: set[str] = set()
        self._synced: set[str] = set()
        self._behind: set[str] = set()
        self.agents_touched = False
        self.unseen_tool = False
        # Filled by a mirror on any thread of the process, taken by the round end.
        self._notices: deque[SyncResult] = deque(maxlen=MAX_NOTICES)
        self._notices_mutex = threading.Lock()

    @property
    def dirty(self) -> frozenset[str]:
        return frozenset(self._dirty)

    @property
    def needs_read_back(self) -> frozenset[str]:
        """Dirty files whose last change this round was not already synced by a
        controlled write: the only ones the round-end fallback reads back."""
        return frozenset(self._dirty - self._synced)

    def memory_file(self, path: str) -> str | None:
        """The canonical root memory-file name ``path`` resolves to in this sandbox."""
        return root_memory_file(
            path, case_sensitive=self.case_sensitive, workspace_prefixes=self.workspace_prefixes
        )

    def on_tool_call(
        self, name: str, arguments: object = None, *, guarded: bool = False
    ) -> str | None:
        """Record one tool call; returns the memory file it marked, if any. ``guarded``:
        the call was a file tool wrapped by ``GuardedFileTools`` (module doc). Never raises:
        arguments that name no file (not a JSON object, say) mark nothing."""
        if not isinstance(name, str):
            self.unseen_tool = True
            return None
        if name in TOOL_FILES:
            return self._reported(TOOL_FILES[name])
        if name in NO_FILE_TOOLS:
            return None
        if name not in FILE_TOOLS:
            # A shell may have moved a memory file away: only the sandbox can tell.
            self.unseen_tool = self.unseen_tool or guarded is not True
            return None
        path = target_path(arguments)
        filename = None if path is None else self.memory_file(path)
        if filename is None:
            return None
        if guarded is True:
            return self._reported(filename)
        self.mark_dirty(filename)
        return filename

    def _reported(self, filename: str) -> str:
        """A write memstrata ran itself (a memory tool, a guarded file tool): its report,
        often sent after the call ran, is the write it synced itself (``mark_synced``),
        not a change after it. Dirty all the same, unsynced if it did not sync."""
        if filename in SYNCED_FILES:
            self._dirty.add(filename)
        else:
            self.mark_dirty(filename)  # AGENTS.md: the guard refused it; restoring is harmless
        return filename

    def mark_dirty(self, filename: str) -> None:
        if filename == FileKind.AGENTS.filename:
            self.agents_touched = True
        elif filename in SYNCED_FILES:
            self._dirty.add(filename)
            self._synced.discard(filename)  # changed again: the earlier sync is not enough
        else:
            raise ValueError(f"{filename!r} is not a root memory file")

    def mark_synced(self, filename: str) -> None:
        """A controlled write synced ``filename`` to the DB after its last change, so the
        round end need not read it back (a later unguarded write marks it dirty again) —
        also when the host reports the tool's call only after it ran."""
        if filename in SYNCED_FILES:
            self._synced.add(filename)

    def advance_base(self, filename: str, base: SyncBase, *, edited: bool = False) -> None:
        """A controlled write settled ``filename`` at ``base`` (``SyncResult.base``): compare
        the sandbox copy with it from now on, also over an older base record (its write
        may have failed), not with the round start, which would make the write look like
        someone else's change. The copy is no longer behind the DB. ``edited``: a memory
        tool edits exactly this copy now (:class:`EditedBase`)."""
        if filename in SYNCED_FILES:
            seen = EditedBase if edited else SeenBase
            self._bases[filename] = seen(base.version, base.content)
            self._behind.discard(filename)

    def fall_behind(self, filename: str, base: SyncBase | None = None) -> None:
        """A tool's edit went to the DB alone: the sandbox copy lags behind the DB until a
        sync pushes the DB copy (``base``: what it is to be compared with meanwhile)."""
        if filename in SYNCED_FILES:
            if base is not None:
                # With the copies it names: on a shared sandbox, those another session's
                # agent may have read (``push.carried``).
                self._bases[filename] = SeenBase(base.version, base.content, base.older)
            self._behind.add(filename)

    def is_behind(self, filename: str) -> bool:
        """Whether the sandbox copy lacks a write the DB holds (``fall_behind``): editing it
        while the DB is unreachable would clash with that write later."""
        return filename in self._behind

    def notice(self, result: SyncResult) -> None:
        """Another sync (a frontend edit's mirror) settled this sandbox's copy: ``result``
        is reported by the next round end (``SyncService.end_round``)."""
        with self._notices_mutex:
            self._notices.append(result)

    def take_notices(self) -> list[SyncResult]:
        """The notices since the last call, oldest first, forgotten here."""
        with self._notices_mutex:
            taken = list(self._notices)
            self._notices.clear()
        return taken

    def base(self, filename: str) -> SyncBase | None:
        """The DB version and content of ``filename`` when the round started, or at this
        round's last controlled write of it (``advance_base``)."""
        return self._bases.get(filename)

    def base_version(self, filename: str) -> int | None:
        base = self._bases.get(filename)
        return None if base is None else base.version

    def start_next_round(
        self, bases: Mapping[str, SyncBase] | None, still_dirty: Iterable[str] = ()
    ) -> None:
        """Reset after a round end: new bases (``None`` keeps the old ones) and the files
        whose read-back failed, which stay dirty so the next round end retries them.

        Seen bases are kept: the snapshot is the DB's copy, not the sandbox's, and where a
        base record's write failed the snapshot would lose to that stale record. A read-back
        that moved the copy on says so in its result (``AgentSession.end_round`` passes it
        to :meth:`advance_base`); one that did not leaves it where this session saw it.
        """
        if bases is not None:
            seen = {n: b for n, b in self._bases.items() if isinstance(b, SeenBase)}
            self._bases = {**bases, **seen}
        self._dirty = set(still_dirty) & SYNCED_FILES
        self._synced = set()
        self._behind &= self._dirty  # the others were read back, which pushed the DB copy
        self.agents_touched = False
        self.unseen_tool = False

    @property
    def asks_for_missing(self) -> bool:
        """Whether the round end must ask the sandbox which synced files are missing: a
        tool memstrata cannot see into ran, and no file is read back already."""
        return self.unseen_tool and not self.needs_read_back


async def mark_missing(tracker: RoundTracker, sandbox: Sandbox) -> list[str]:
    """Mark dirty the synced memory files missing from ``sandbox`` after a tool memstrata
    cannot see into ran this round (module doc); the names marked. Nothing is asked when
    no such tool ran, or when the round end reads every file back already; a sandbox that
    cannot answer marks nothing (the read-back would fail on it as well)."""
    if not tracker.asks_for_missing:
        return []
    # Answered for this round: a round end that reads nothing back keeps the tracker as it
    # is, and the flag left set made every later round ask again. Cleared before asking, so
    # a tool call reported meanwhile sets it for the next; a sandbox that cannot answer is
    # asked again next time.
    tracker.unseen_tool = False
    names = sorted(SYNCED_FILES)
    found = await asyncio.gather(*(sandbox.exists(n) for n in names), return_exceptions=True)
    if any(isinstance(there, BaseException) for there in found):
        tracker.unseen_tool = True
    missing = [name for name, there in zip(names, found, strict=True) if there is False]
    for name in missing:
        tracker.mark_dirty(name)
    return missing
