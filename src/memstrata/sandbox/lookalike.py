"""Root file names that look like a memory file's but are not it: ``memory.md`` or
``MEMORY.MD`` on a case-sensitive sandbox, ``MEMROY.md``, ``AGENT.md``.

A write to one is no write to memory (the file is the platform's, and passes through), yet
the agent may well believe it saved something: :func:`lookalike_memory_file` says which
memory file such a name resembles, so that a guarded file tool can say so
(:mod:`memstrata.agent.file_guard`). The rule: a file at the sandbox root whose name ends
in ``.md`` (in any case), is not itself a memory file on this sandbox
(:func:`~memstrata.sandbox.base.root_memory_file`), and, compared without regard to case,
is at most :func:`allowed_edits` single-letter edits away from one — an insertion, a
deletion, a substitution, or a swap of two neighbouring letters — the closest (the first
in ``FileKind`` order on a tie).

A read-back that finds a memory file missing restores the DB copy; :func:`noting_lookalikes`
then looks for such files beside it (``mv MEMORY.md memory.md`` after adding a line) and
says so in the result: the lookalike is not read back as memory (it may hold anything),
and it is left in place, never deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from rapidfuzz.distance import OSA

from memstrata.logs import log_event, log_failure
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.base import (
    DEFAULT_WORKSPACE_PREFIXES,
    Sandbox,
    normalise_sandbox_path,
    root_memory_file,
)
from memstrata.sandbox.push import DB_TO_SANDBOX
from memstrata.sandbox.results import Outcome, SyncResult, Target

logger = logging.getLogger("memstrata.sandbox.sync")

MARKDOWN = ".md"
# What a read-back did when the sandbox copy was missing (or blank): the DB copy was pushed.
_RESTORES = frozenset({Outcome.RESTORED, Outcome.PUSHED})


def allowed_edits(filename: str) -> int:
    """How many edits a name may be from ``filename`` and still look like it: two, but one
    for the four-letter SOUL and USER, where two would take in ``OUR.md`` or ``USA.md``."""
    return 1 if len(filename) - len(MARKDOWN) <= 4 else 2


def lookalike_memory_file(
    path: str,
    *,
    case_sensitive: bool,
    workspace_prefixes: Sequence[str] = DEFAULT_WORKSPACE_PREFIXES,
) -> str | None:
    """The memory file (``"MEMORY.md"`` …, ``"AGENTS.md"`` too) that the root file ``path``
    names looks like without being it on this sandbox, or ``None`` (module doc)."""
    relative = normalise_sandbox_path(path, workspace_prefixes)
    if relative is None or "/" in relative:
        return None
    if root_memory_file(relative, case_sensitive=case_sensitive) is not None:
        return None
    folded = relative.casefold()
    if not folded.endswith(MARKDOWN):
        return None
    closest: tuple[int, str] | None = None
    for kind in FileKind:
        name = kind.filename
        edits = edit_distance(folded, name.casefold(), limit=allowed_edits(name))
        if edits is not None and (closest is None or edits < closest[0]):
            closest = (edits, name)
    return None if closest is None else closest[1]


def edit_distance(a: str, b: str, *, limit: int) -> int | None:
    """The edits (insert, delete, substitute, swap neighbours: optimal string alignment)
    from ``a`` to ``b``, or ``None`` past ``limit``."""
    edits = OSA.distance(a, b, score_cutoff=limit)
    return edits if edits <= limit else None


async def lookalikes_of(sandbox: Sandbox, filename: str) -> list[str]:
    """The root files of ``sandbox`` that look like the memory file ``filename`` (module
    doc), sorted."""
    case_sensitive = sandbox.case_sensitive
    return [
        path
        for path in await sandbox.list()
        if "/" not in path
        and lookalike_memory_file(path, case_sensitive=case_sensitive, workspace_prefixes=())
        == filename
    ]


async def noting_lookalikes(t: Target, result: SyncResult) -> SyncResult:
    """``result``, and if it pushed the DB copy to the sandbox while a root file that looks
    like the memory file is there, with a detail naming it and a ``sync.lookalike_file``
    warning. A sandbox that cannot be listed leaves the result as it is."""
    if result.outcome not in _RESTORES or result.direction != DB_TO_SANDBOX:
        return result
    try:
        found = await lookalikes_of(t.sandbox, result.filename)
    except Exception as exc:
        log_failure(logger, "sync.lookalike_check_failed", exc, user_id=t.user_id)
        return result
    if not found:
        return result
    names = ", ".join(repr(name) for name in found)
    note = (
        f"{names} looks like {result.filename} but is not it, so its text was not stored "
        f"(left in place); {result.filename} was restored from the database — move what "
        f"belongs in memory into {result.filename}, then remove {names}"
    )
    log_event(
        logger,
        "sync.lookalike_file",
        logging.WARNING,
        user_id=t.user_id,
        session_id=t.session_id,
        file=result.filename,
        lookalikes=found,
    )
    detail = note if result.detail is None else f"{result.detail}; {note}"
    return replace(result, detail=detail)
