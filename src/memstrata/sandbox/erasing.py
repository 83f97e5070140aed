"""Where a local sandbox being erased is put, and the erasures a kill cut short.

:meth:`LocalSandboxProvider.erase_user <memstrata.sandbox.local.LocalSandboxProvider.erase_user>`
renames a user's directory to :func:`aside_name` in the provider's root before removing
it. A process killed while removing it (SIGKILL, a reboot, a container stopped) leaves
that directory with the rest of the user's files — personal data of a user being erased
— until the same user is erased again, which removes it first. Nothing else does, so
:func:`unfinished_erasures` finds them: ``memstrata user list`` reports each, with the
user id where its directory name gives it back.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from memstrata.errors import InvalidUserIdError, SandboxError
from memstrata.memory.kinds import validate_user_id
from memstrata.sandbox.dir_names import safe_dir_name

# User directory names never start with a dot (``safe_dir_name`` escapes it), so these
# never clash with a user's sandbox.
_PREFIX, _SUFFIX = ".", ".erasing"


def aside_name(dir_name: str) -> str:
    """The name, in the provider's root, of the user directory ``dir_name`` being erased."""
    return f"{_PREFIX}{dir_name}{_SUFFIX}"


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
