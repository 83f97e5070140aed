"""memstrata's bookkeeping inside a sandbox: sync bases and preserved conflict copies.

Both live under ``.memstrata/`` at the sandbox root, beside the files they describe, so
they survive process restarts and are seen by every process that opens the sandbox.

* ``.memstrata/base/<FILE>.json`` — ``{"version": N, "content": "..."}``: the DB copy
  the sandbox file last matched. Sync compares the sandbox file with it to tell an agent
  edit (sandbox differs from its base) from a sandbox that merely lags behind the DB
  (sandbox equals its base, DB moved on), and uses it as the merge base on a conflict.
  A push writes it *before* the file, with ``"previous": "..."`` (the copy it replaces),
  kept until the sandbox's next write-back (the agent may be working from that copy);
  records without ``previous`` (earlier releases, or a settled push) read as before. A
  push over a copy that an earlier push wrote keeps that push's ``previous`` and names
  the copy the file holds as ``"replacing"`` until the file is written (``SyncBase``).
* ``.memstrata/lock`` — the local sandbox's ``flock`` file (:mod:`memstrata.sandbox.exclusive`).
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
    previous, replacing = (_text_or_none(data.get(key)) for key in ("previous", "replacing"))
    if isinstance(version, int) and not isinstance(version, bool) and isinstance(content, str):
        return SyncBase(version, content, previous, replacing)
    return None


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


async def write_base(sandbox: Sandbox, filename: str, base: SyncBase) -> None:
    data: dict[str, object] = {"version": base.version, "content": base.content}
    if base.previous is not None:
        data["previous"] = base.previous
    if base.replacing is not None:
        data["replacing"] = base.replacing
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
