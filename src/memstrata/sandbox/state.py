"""memstrata's bookkeeping inside a sandbox: sync bases and preserved conflict copies (and
the session holds and read-back marks of :mod:`memstrata.sandbox.sessions`).

They live under ``.memstrata/`` at the sandbox root, beside the files they describe, so
they survive process restarts and are seen by every process that opens the sandbox.

* ``.memstrata/base/<FILE>.json`` — ``{"version": N, "content": "..."}``: the DB copy
  the sandbox file last matched. Sync compares the sandbox file with it to tell an agent
  edit (sandbox differs from its base) from a sandbox that merely lags behind the DB
  (sandbox equals its base, DB moved on), and uses it as the merge base on a conflict.
  A push writes it *before* the file, with the other copies memstrata wrote to the file
  since the sandbox's last write-back (``SyncBase.older``, oldest first; the agent may be
  working from any of them): the oldest as ``"previous"``, the newest as ``"replacing"``
  and those between as ``"between"`` (a list). Records of the release before wrote only
  ``previous`` (the oldest copy) and, while a push's file write landed, ``replacing``
  (the newest): they read as those copies, as they meant. Records without any (earlier
  releases, or after a write-back) read as before.
* ``.memstrata/lock`` — the local sandbox's ``flock`` file (:mod:`memstrata.sandbox.exclusive`).
* ``.memstrata/open`` — a local session sandbox's hold, ``flock``-ed while a process has the
  session open, and ``.memstrata/read-back/<session dir>.json`` in the user's sandbox — a
  session whose edits may wait for a read-back (:mod:`memstrata.sandbox.sessions`).
* ``.memstrata/conflicts/<FILE>.<UTC timestamp>.md`` — an agent's copy that lost a
  conflict (or that the DB refused, with ``.rejected`` before ``.md``), kept for the user;
  a file that was not text is kept as its exact bytes (``sandbox.base.Undecodable``).

Reads of a missing or malformed base return ``None``: sync then falls back to the
round tracker's base or the spec's plain sandbox-first rule. Failures propagate; the
caller decides whether they matter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.rule import SyncBase

STATE_DIR = ".memstrata"
BASE_DIR = f"{STATE_DIR}/base"
CONFLICT_DIR = f"{STATE_DIR}/conflicts"


def base_path(filename: str) -> str:
    return f"{BASE_DIR}/{filename}.json"


async def read_base(sandbox: Sandbox, filename: str) -> SyncBase | None:
    raw = await sandbox.read_text(base_path(filename))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    version, content = data.get("version"), data.get("content")
    if isinstance(version, int) and not isinstance(version, bool) and isinstance(content, str):
        return SyncBase(version, content, _older_copies(data))
    return None


def _older_copies(data: dict[str, object]) -> tuple[str, ...]:
    """A record's ``older`` copies (module doc); what is not text is read as absent."""
    between = data.get("between")
    middle = between if isinstance(between, list) else []
    found = [data.get("previous"), *middle, data.get("replacing")]
    return tuple(copy for copy in found if isinstance(copy, str))


async def write_base(sandbox: Sandbox, filename: str, base: SyncBase) -> None:
    data: dict[str, object] = {"version": base.version, "content": base.content}
    if base.older:
        data["previous"] = base.older[0]
    if len(base.older) > 2:
        data["between"] = list(base.older[1:-1])
    if len(base.older) > 1:
        data["replacing"] = base.older[-1]
    await sandbox.write_text(base_path(filename), json.dumps(data, ensure_ascii=False))


def utc_stamp(now: Callable[[], datetime] | None = None) -> str:
    """``20260301T120000.123456Z``: sortable, unique per microsecond, safe in file names."""
    moment = (now or (lambda: datetime.now(UTC)))()
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


async def preserve_copy(
    sandbox: Sandbox, filename: str, content: str, *, rejected: bool = False
) -> str:
    """Save ``content`` under ``.memstrata/conflicts/`` and return the path used; an
    ``Undecodable`` is handed to the sandbox as it is, to be written as its bytes."""
    suffix = ".rejected.md" if rejected else ".md"
    path = f"{CONFLICT_DIR}/{filename}.{utc_stamp()}{suffix}"
    await sandbox.write_text(path, content)
    return path
