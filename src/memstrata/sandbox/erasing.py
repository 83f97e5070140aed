"""A local sandbox's erasure: the removal, where the directory is put meanwhile, and the
erasures a kill cut short.

:meth:`LocalSandboxProvider.erase_user <memstrata.sandbox.local.LocalSandboxProvider.erase_user>`
renames a user's directory to :func:`aside_name` in the provider's root before removing
it. A process killed while removing it (SIGKILL, a reboot, a container stopped) leaves
that directory with the rest of the user's files — personal data of a user being erased
— until the same user is erased again, which removes it first. Nothing else does, so
:func:`unfinished_erasures` finds them: ``memstrata user list`` reports each, with the
user id where its directory name gives it back.

The removal itself (:func:`erase_user_directory`) lives here rather than in
:mod:`memstrata.sandbox.local`, whose sandbox reads and writes files: erasing is the one
operation on a user's whole directory, and it shares its naming with the look for leftovers.
"""

from __future__ import annotations

import os
import shutil
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from memstrata.errors import InvalidUserIdError, SandboxError, SandboxPathError
from memstrata.memory.kinds import validate_user_id
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.file_io import file_type

# User directory names never start with a dot (``safe_dir_name`` escapes it), so these
# never clash with a user's sandbox.
_PREFIX, _SUFFIX = ".", ".erasing"


def aside_name(dir_name: str) -> str:
    """The name, in the provider's root, of the user directory ``dir_name`` being erased."""
    return f"{_PREFIX}{dir_name}{_SUFFIX}"


def erase_user_directory(root_dir: Path, user_id: str) -> bool:
    """Remove the sandbox directory of ``user_id`` under ``root_dir`` with everything in
    it, through :func:`aside_name` (:meth:`LocalSandboxProvider.erase_user
    <memstrata.sandbox.local.LocalSandboxProvider.erase_user>` says how); False when there
    was none. Blocking."""
    name = safe_dir_name(validate_user_id(user_id))
    root = os.path.realpath(root_dir)
    directory = os.path.join(root, name)
    aside = os.path.join(root, aside_name(name))
    removed = False

    def remove_aside() -> None:
        if os.path.islink(aside):
            raise SandboxPathError(
                f"{aside} (where the sandbox of {user_id!r} is put to be erased) is a "
                "symlink; it was not followed — remove it by hand"
            )
        shutil.rmtree(aside)

    try:
        if os.path.lexists(aside):  # left by an erase cut short
            remove_aside()
            removed = True
        try:
            mode = os.lstat(directory).st_mode
        except FileNotFoundError:
            return removed
        if stat.S_ISLNK(mode):
            raise SandboxPathError(
                f"the sandbox directory of {user_id!r} ({directory}) is a symlink to "
                f"{os.readlink(directory)!r}; it was not removed, since that would delete "
                "what it leads to — check where it leads and remove the link by hand"
            )
        if not stat.S_ISDIR(mode):
            raise SandboxError(
                f"the sandbox directory of {user_id!r} ({directory}) is not a directory "
                f"(it is {file_type(mode)}); remove it by hand"
            )
        os.rename(directory, aside)
        remove_aside()
    except SandboxError:
        raise
    except OSError as exc:
        raise SandboxError(
            f"cannot remove the sandbox of {user_id!r} in {root_dir}: {exc.strerror or exc}"
        ) from exc
    return True


@dataclass(frozen=True)
class UnfinishedErasure:
    """What an erase cut short left: ``path``, and the user it belonged to — ``None`` when
    the directory name is a hashed one (ids over 120 encoded characters) or not one
    memstrata makes."""

    path: Path
    user_id: str | None


def unfinished_erasures(root: Path) -> list[UnfinishedErasure]:
    """The directories erasures cut short left in ``root``, by name; none when ``root``
    does not exist. ``SandboxError`` when it cannot be listed."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SandboxError(f"cannot list the sandbox root {root}: {exc.strerror or exc}") from exc
    return [
        UnfinishedErasure(Path(root) / name, user_of(name[len(_PREFIX) : -len(_SUFFIX)]))
        for name in names
        if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and len(name) > len(aside_name(""))
    ]


def user_of(dir_name: str) -> str | None:
    """The user id ``safe_dir_name`` turns into ``dir_name``, or ``None`` (a hashed name,
    or one it does not make)."""
    candidate = urllib.parse.unquote(dir_name, errors="replace")  # U+FFFD: no round trip
    try:
        user_id = validate_user_id(candidate)
    except InvalidUserIdError:
        return None
    return user_id if safe_dir_name(user_id) == dir_name else None
