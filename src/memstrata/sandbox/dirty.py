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

Marking is deliberately generous: a false positive costs one read-back that finds nothing
changed, a false negative loses an edit until the next session. A write that targets the
root AGENTS.md sets :attr:`RoundTracker.agents_touched` so the round end restores the
template. Shell edits cannot be seen (the spec's documented blind spot).

The tracker also remembers each file's DB version and content when the round started: the
base that the round-end read-back writes against (``expected_version``) and merges from
when a human edited the same file meanwhile (see :mod:`memstrata.sandbox.sync`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from memstrata.errors import ToolInputError
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.sandbox.base import DEFAULT_WORKSPACE_PREFIXES, root_memory_file
from memstrata.sandbox.rule import SyncBase

TOOL_FILES: Mapping[str, str] = {
    "record_memory": FileKind.MEMORY.filename,
    "update_long_term_memory": FileKind.MEMORY.filename,
    "update_user": FileKind.USER.filename,
}
FILE_TOOLS = frozenset({"write_file", "edit_file"})
PATH_ARGUMENTS = ("path", "file_path", "filename")
SYNCED_FILES = frozenset(kind.filename for kind in USER_FILE_KINDS)


def decode_tool_arguments(arguments: Mapping[str, object] | str | None) -> dict[str, object]:
    """Tool-call arguments as a dict; OpenAI delivers them as a JSON string. The one
    decoder: strict, so a tool can tell the model what is wrong (``ToolInputError``)."""
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        return dict(arguments)
    try:
        decoded = json.loads(arguments)
    except ValueError as exc:
        raise ToolInputError(f"arguments are not valid JSON ({exc.args[0]})") from exc
    if not isinstance(decoded, dict):
        raise ToolInputError("arguments must be a JSON object")
    return decoded


def target_path(arguments: Mapping[str, object] | str | None) -> str | None:
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
        self.agents_touched = False

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
        self, name: str, arguments: Mapping[str, object] | str | None = None
    ) -> str | None:
        """Record one tool call; returns the memory file it marked, if any."""
        if name in TOOL_FILES:
            self.mark_dirty(TOOL_FILES[name])
            return TOOL_FILES[name]
        if name not in FILE_TOOLS:
            return None
        path = target_path(arguments)
        filename = None if path is None else self.memory_file(path)
        if filename is None:
            return None
        self.mark_dirty(filename)
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
        round end need not read it back (a later unguarded write marks it dirty again)."""
        if filename in self._dirty:
            self._synced.add(filename)

    def advance_base(self, filename: str, base: SyncBase) -> None:
        """A controlled write left sandbox and DB both at ``base``: compare with it from now
        on when the sandbox has no base record (it could not be written), not with the
        round start, which would make the write look like someone else's change."""
        if filename in SYNCED_FILES:
            self._bases[filename] = base

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
        whose read-back failed, which stay dirty so the next round end retries them."""
        if bases is not None:
            self._bases = dict(bases)
        self._dirty = set(still_dirty) & SYNCED_FILES
        self._synced = set()
        self.agents_touched = False
