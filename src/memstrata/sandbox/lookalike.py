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
"""

from __future__ import annotations

from collections.abc import Sequence

from rapidfuzz.distance import OSA

from memstrata.memory.kinds import FileKind
from memstrata.sandbox.base import (
    DEFAULT_WORKSPACE_PREFIXES,
    normalise_sandbox_path,
    root_memory_file,
)

MARKDOWN = ".md"


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
