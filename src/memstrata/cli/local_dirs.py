"""The local directories a server needs, checked before it starts anything.

A skill directory that does not exist and a sandbox root this user cannot write were
noticed only at first use: a warning per skill listing (``skills.skipped``), a
``sandbox_failed`` warning per memory-file write, while the server reported ready. Both
are settings an operator typed, wrong from the start and fixed only by changing them, so
``memstrata serve`` refuses to start, in one line naming the setting and the path:

- ``MEMSTRATA_SKILL_DIRS``: each directory must exist and be readable (a typo or a missing
  mount; the skills in it would silently be missing for every agent);
- the sandbox root (``MEMSTRATA_SANDBOX_ROOT``, default ``<data_dir>/sandboxes``) must be a
  directory this user can write, or one it can create (the first write makes it), on a
  file system that stores files: not one of the kernel's pseudo file systems (``/proc``,
  ``/sys``, ``/dev``...), where root passes every permission check and the first write
  then fails (``mkdir /proc/x``: ENOENT; ``/sys/fs/x``: EPERM) or makes something else (a
  cgroup in cgroup2); and not a path starting with ``~``, which no shell expanded (a .env
  file, a systemd unit), so that the sandboxes would go to a directory named ``~`` in the
  working directory.

A sandbox that fails later (a disk filled, permissions changed under a running server)
degrades as before: the database write stands, with a warning (spec §5). Only the start
is refused. Nothing is created here: the directories keep the modes their first writer
gives them.

:func:`open_to_others` finds the data directory and the sandbox root when other accounts
may list or write them, for ``serve``'s start-up WARNING: not a refusal (a
directory opened on purpose, or made by an older release, still works), but the
sandboxes hold every user's memory and the data directory the development secret and the
embedded database.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by commands that may never read the settings
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
    setting = (
        "MEMSTRATA_SANDBOX_ROOT"
        if settings.sandbox_root is not None
        else "MEMSTRATA_SANDBOX_ROOT (unset: <MEMSTRATA_DATA_DIR>/sandboxes)"
    )
    tilde = unexpanded_tilde(root)
    if tilde is not None:  # unset, the root is the data directory's: that is the typo
        typed = (
            "MEMSTRATA_SANDBOX_ROOT" if settings.sandbox_root is not None else "MEMSTRATA_DATA_DIR"
        )
        return f"{setting}: {tilde}; set {typed} to an absolute path"
    unwritable = _unwritable(root)
    if unwritable is None:
        return None
    reason, instead = unwritable
    return (
        f"{setting}: cannot write the sandbox root {root}: {reason}; set "
        f"MEMSTRATA_SANDBOX_ROOT to {instead}"
    )


def unexpanded_tilde(root: Path) -> str | None:
    """What a root that starts with ``~`` would be, or None. Only a shell expands ``~``: a
    value from a .env file, a systemd unit, a compose file or a quoted shell word reaches
    the settings as typed, and ``~/sandboxes`` would be a directory named ``~`` in the
    working directory, written without an error while the operator looks in their home."""
    if root.is_absolute() or not root.parts or not root.parts[0].startswith("~"):
        return None
    return (
        f"the sandbox root {root} starts with '~', which only a shell expands: as given it "
        f"is {root.absolute()}, a directory named {root.parts[0]!r} in the working directory"
    )


# The kernel's pseudo file systems (Linux type names, /proc/self/mountinfo): views of
# kernel state that store no files of ours. tmpfs and ramfs are not among them: they do
# store files, in memory.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts",
        "devtmpfs", "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs", "proc", "pstore",
        "rpc_pipefs", "securityfs", "selinuxfs", "sysfs", "tracefs",
    }
)  # fmt: skip
MOUNTINFO = Path("/proc/self/mountinfo")
# What to set MEMSTRATA_SANDBOX_ROOT to instead.
WRITABLE = "a directory this user can write"
STORING = (
    "a directory on a file system that stores files: a disk or a volume (tmpfs for files "
    "that may vanish at a reboot)"
)


def _unwritable(root: Path) -> tuple[str, str] | None:
    """Why files cannot be made in ``root`` (or ``root`` cannot be made) and what to set
    instead, or None."""
    target = root.absolute()
    while not target.exists():  # the first write makes the missing directories
        if target.parent == target:
            return "no directory above it exists", WRITABLE
        target = target.parent
    if not target.is_dir():
        return f"{target} is not a directory", WRITABLE
    # Before access(2), which answers yes to root in /proc and /sys. The file system type,
    # not a probe write: a probe could leave a file (or, in cgroup2, a cgroup) behind.
    mount = _mount_of(target)
    if mount is not None and mount[1] in PSEUDO_FILESYSTEMS:
        why = f"{target} is on the kernel's {mount[1]} pseudo file system (mounted on {mount[0]})"
        return why, STORING
    # access(2), not a test file: nothing is left behind, and it answers for root too on a
    # read-only file system (EROFS).
    if os.access(target, os.W_OK | os.X_OK):
        return None
    if os.statvfs(target).f_flag & os.ST_RDONLY:
        return f"{target} is on a read-only file system", WRITABLE
    return f"this user may not create files in {target}", WRITABLE


def _mount_of(path: Path) -> tuple[str, str] | None:
    """The mount point and file system type of the mount holding ``path`` (an existing
    directory; symbolic links resolved), or None where /proc/self/mountinfo cannot be read
    (not Linux)."""
    try:
        mountinfo = MOUNTINFO.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None
    return mount_in(os.path.realpath(path), mountinfo)


def mount_in(path: str, mountinfo: str) -> tuple[str, str] | None:
    """The mount point and type of the mount holding the absolute, resolved ``path``
    according to ``mountinfo`` (proc(5)'s /proc/<pid>/mountinfo): the longest mount point
    above it, the last-listed one when a point is mounted over again (the visible one)."""
    found: tuple[str, str] | None = None
    for line in mountinfo.splitlines():
        # ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS
        fields = line.split()
        if "-" not in fields[6:-1]:
            continue
        point = _unescape(fields[4])
        fstype = fields[fields.index("-", 6) + 1]
        above = point == "/" or path == point or path.startswith(point.rstrip("/") + "/")
        if above and (found is None or len(point) >= len(found[0])):
            found = (point, fstype)
    return found


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` a space, ``\\011`` a tab, ``\\012`` a newline,
    ``\\134`` a backslash) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


# Others' (not the owner's, not the group's) read and write bits. Not search (x): as root
# the embedded server runs as its own user, which must pass through the data directory
# (memstrata.db.embedded_perms grants it), and passing through lists nothing.
OTHERS = 0o006


def open_to_others(settings: Settings) -> list[tuple[str, Path, int]]:
    """The data directory and the sandbox root, each that exists and lets others list or
    write it (mode & 0o006): ``(setting, path, mode)``. A group may be let in: that is the
    shared-group set-up (``MEMSTRATA_SANDBOX_FILE_MODE=660``)."""
    found: list[tuple[str, Path, int]] = []
    for setting, path in (
        ("MEMSTRATA_DATA_DIR", settings.data_dir),
        ("MEMSTRATA_SANDBOX_ROOT", settings.resolved_sandbox_root),
    ):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:  # not made yet (the first write makes it), or not ours to see
            continue
        if mode & OTHERS:
            found.append((setting, path, mode))
    return found
