"""The local directories a server needs, checked before it starts anything.

A skill directory that does not exist and a sandbox root this user cannot write were
noticed only at first use: a warning per skill listing (``skills.skipped``), a
``sandbox_failed`` warning per memory-file write, while the server reported ready. Both
are settings an operator typed, wrong from the start and fixed only by changing them, so
``memstrata serve`` refuses to start, in one line naming the setting and the path:

- ``MEMSTRATA_SKILL_DIRS``: each directory must exist and be readable (a typo or a missing
  mount; the skills in it would silently be missing for every agent);
- the sandbox root (``MEMSTRATA_SANDBOX_ROOT``, default ``<data_dir>/sandboxes``) must be a
  directory this user can write, or one it can create (the first write makes it).

A sandbox that fails later (a disk filled, permissions changed under a running server)
degrades as before: the database write stands, with a warning (spec §5). Only the start
is refused. Nothing is created here: the directories keep the modes their first writer
gives them.
"""

from __future__ import annotations

import os
from pathlib import Path

from memstrata.config import Settings


def local_dir_problem(settings: Settings) -> str | None:
    """The first problem of the skill directories, then of the sandbox root, as the one
    line ``memstrata serve`` fails with; None when both are usable."""
    for directory in settings.skill_dirs:
        problem = skill_dir_problem(directory)
        if problem is not None:
            return problem
    return sandbox_root_problem(settings)


def skill_dir_problem(directory: Path) -> str | None:
    if not directory.exists():
        reason = "does not exist"
    elif not directory.is_dir():
        reason = "is not a directory"
    elif not os.access(directory, os.R_OK | os.X_OK):
        reason = "cannot be read by this user"
    else:
        return None
    return (
        f"MEMSTRATA_SKILL_DIRS: {directory} {reason}; create it (one folder per skill with a "
        "SKILL.md) or remove it from MEMSTRATA_SKILL_DIRS"
    )


def sandbox_root_problem(settings: Settings) -> str | None:
    root = settings.resolved_sandbox_root
    reason = _unwritable(root)
    if reason is None:
        return None
    setting = (
        "MEMSTRATA_SANDBOX_ROOT"
        if settings.sandbox_root is not None
        else "MEMSTRATA_SANDBOX_ROOT (unset: <MEMSTRATA_DATA_DIR>/sandboxes)"
    )
    return (
        f"{setting}: cannot write the sandbox root {root}: {reason}; set "
        "MEMSTRATA_SANDBOX_ROOT to a directory this user can write"
    )


def _unwritable(root: Path) -> str | None:
    """Why files cannot be made in ``root`` (or ``root`` cannot be made), or None."""
    target = root.absolute()
    while not target.exists():  # the first write makes the missing directories
        if target.parent == target:
            return "no directory above it exists"
        target = target.parent
    if not target.is_dir():
        return f"{target} is not a directory"
    # access(2), not a test file: nothing is left behind, and it answers for root too on a
    # read-only file system (EROFS).
    if os.access(target, os.W_OK | os.X_OK):
        return None
    if os.statvfs(target).f_flag & os.ST_RDONLY:
        return f"{target} is on a read-only file system"
    return f"this user may not create files in {target}"
