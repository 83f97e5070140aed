"""The agents' copies that sync kept aside, for the user to see: list, read, dismiss.

When the read-back rule finds an agent's edit of a memory file in conflict with a human's,
the DB copy wins and the agent's copy is kept aside in the sandbox (and so is a copy the
database refused), as ``.memstrata/conflicts/<FILE>.<UTC stamp>.md``
(:mod:`memstrata.sandbox.state`). Without this module nothing shows them: to the user the
agent's edit is simply gone. The REST API (``/api/memory/conflicts``), the settings
page, ``memstrata conflicts`` and the MCP resources ``memstrata://conflicts…`` (read-only)
are thin transports over the three coroutines below.

**Names.** A copy is named by its file name as sync wrote it:
``MEMORY.md.20260301T120000.123456Z.md`` (``….rejected.md``: the database refused the
text). A copy kept in a session's own sandbox is ``sessions/<dir>/<that name>``: the local
directory provider keeps each session sandbox in a ``sessions/<dir>/`` folder of the
user's (:mod:`memstrata.sandbox.local`), where the user's sandbox lists it; a provider that
keeps them elsewhere has none to list here. A name is taken only in exactly this form
(:func:`parse_name`: a memory file's name, a valid UTC stamp, a directory name as
:func:`~memstrata.sandbox.dir_names.safe_dir_name` makes them), which is the form of every
name :func:`list_copies` returns: no ``..``, no other file of the sandbox, and only the
authenticated user's own sandbox is ever opened.

**Bounds.** A listing reads the names of every copy (one ``list`` call for the user's
sandbox, one for its session folders) but reads the files of one page only, at most
:data:`MAX_PAGE` of them, :data:`READS_AT_ONCE` at a time, for their size and preview,
and the DB copy of each file they are copies of, once (:func:`preview_of`).

**Failures** are spec 5's sandbox failures: a sandbox that raises or passes its deadline
(``MEMSTRATA_SANDBOX_TIMEOUT_S``, applied by ``Memstrata.open``) is logged as a warning
(``conflicts.sandbox_failed``, with the cause) and never a crash. A listing answers with
what it could read and ``sandbox_failed``; reading or dismissing one copy raises
:class:`CopiesUnavailableError`, which says what failed without the sandbox's paths.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from memstrata.db.integers import MAX_INT
from memstrata.errors import MemstrataError, SandboxEncodingError
from memstrata.logs import log_event, log_failure
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.sandbox.base import Sandbox, SandboxProvider, Undecodable
from memstrata.sandbox.results import open_sandbox
from memstrata.sandbox.state import CONFLICT_DIR, utc_stamp

# Only named: the CLI lists the copies with no database, and starts without its modules.
if TYPE_CHECKING:
    from memstrata.memory.async_store import AsyncStore

logger = logging.getLogger(__name__)

# The most copies one listing reads (each is read whole for its size and first lines).
MAX_PAGE = 50
DEFAULT_PAGE = 20
# Reads of one page in flight together: a page of a slow remote sandbox costs about one
# call's time per READS_AT_ONCE copies, not one per copy.
READS_AT_ONCE = 4
PREVIEW_LINES = 3
PREVIEW_CHARS = 240
# Where the local directory provider keeps a user's session sandboxes, inside the user's.
SESSIONS_DIR = "sessions"

Reason = Literal["conflict", "rejected"]
SandboxState = Literal["ok", "sandbox_failed"]

_FILES = "|".join(re.escape(kind.filename) for kind in USER_FILE_KINDS)
# safe_dir_name's alphabet: lowercase letters, digits, "-", "_", upper-case %XX escapes,
# and "~" + 32 hex digits after a cut; never ".", so never "." or "..".
_SESSION_DIR = r"(?:[a-z0-9_-]|%[0-9A-F]{2}){1,120}(?:~[0-9a-f]{32})?"
_NAME = re.compile(
    rf"\A(?:{SESSIONS_DIR}/(?P<session>{_SESSION_DIR})/)?(?P<file>{_FILES})\."
    r"(?P<stamp>(?P<y>[0-9]{4})(?P<mo>[0-9]{2})(?P<d>[0-9]{2})T(?P<h>[0-9]{2})(?P<mi>[0-9]{2})(?P<s>[0-9]{2})"
    r"\.(?P<us>[0-9]{6})Z)(?P<rejected>\.rejected)?\.md\Z"
)
_NAME_EXAMPLE = "MEMORY.md.20260301T120000.123456Z.md"
# What lists the copies, as a refusal names it; each transport passes its own (the CLI's
# command, the MCP resource), so that the hint is one its reader can follow.
REST_LISTING = "GET /api/memory/conflicts"
_SHOWN_CHARS = 80  # of a refused name, in its error message
_LATER = "try again later"


class InvalidCopyNameError(MemstrataError, ValueError):
    """Not the name of a kept-aside copy (:func:`parse_name`)."""


class UnknownCopyError(MemstrataError, LookupError):
    """A well-formed name with no copy under it (never kept, or dismissed already)."""


class CopiesUnavailableError(MemstrataError):
    """The sandbox failed or passed its deadline: nothing can be said about the copy."""


@dataclass(frozen=True)
class CopyName:
    """A kept-aside copy's identity, all of it in its name."""

    kind: FileKind
    saved_at: datetime
    rejected: bool
    session_dir: str | None
    name: str

    @property
    def reason(self) -> Reason:
        return "rejected" if self.rejected else "conflict"

    @property
    def path(self) -> str:
        """Where it is, relative to the user's sandbox."""
        base = self.name.rsplit("/", 1)[-1]
        inside = f"{CONFLICT_DIR}/{base}"
        return inside if self.session_dir is None else f"{SESSIONS_DIR}/{self.session_dir}/{inside}"


@dataclass(frozen=True)
class CopySummary:
    """One copy in a listing; ``size_bytes`` and ``preview`` are None when it could not be
    read (the listing's warnings say why)."""

    copy: CopyName
    size_bytes: int | None
    preview: str | None


@dataclass(frozen=True)
class CopyText:
    """A copy read whole. ``undecodable``: the file is not UTF-8 text (the database refused
    it for that), and ``content`` shows each byte that does not decode as U+FFFD."""

    copy: CopyName
    content: str
    size_bytes: int
    undecodable: bool


@dataclass(frozen=True)
class CopyPage:
    """One page of a user's copies, newest first. ``total`` (None when the sandbox could
    not be listed) counts every copy that matches, ``next_offset`` is None on the last."""

    copies: list[CopySummary]
    total: int | None
    offset: int
    limit: int
    sandbox: SandboxState = "ok"
    warnings: list[str] = field(default_factory=list)

    @property
    def next_offset(self) -> int | None:
        end = self.offset + self.limit
        return end if self.total is not None and end < self.total else None


def parse_name(name: str, *, listing: str = REST_LISTING) -> CopyName:
    """The copy ``name`` stands for, or ``InvalidCopyNameError`` saying what a name is
    (``listing``: what lists the names, :data:`REST_LISTING` by default)."""
    match = _NAME.match(name) if isinstance(name, str) else None
    saved_at = _stamp_time(match) if match else None
    if match is None or saved_at is None:
        shown = repr(name[:_SHOWN_CHARS]) if isinstance(name, str) else type(name).__name__
        raise InvalidCopyNameError(
            f"{shown} is not the name of a kept-aside copy: names are as {listing} "
            f"lists them, such as {_NAME_EXAMPLE!r}"
        )
    kind = next(k for k in USER_FILE_KINDS if k.filename == match["file"])
    return CopyName(kind, saved_at, match["rejected"] is not None, match["session"], name)


def _stamp_time(match: re.Match[str]) -> datetime | None:
    """The stamp's time, if it is one that ``state.utc_stamp`` writes (the one definition
    of the format: a time that does not print back to the same stamp is refused)."""
    try:
        y, mo, d, h, mi, s, us = (int(match[k]) for k in ("y", "mo", "d", "h", "mi", "s", "us"))
        moment = datetime(y, mo, d, h, mi, s, us, tzinfo=UTC)
    except ValueError:  # month 13, 30 February, …
        return None
    return moment if utc_stamp(lambda: moment) == match["stamp"] else None


def name_of_path(path: str) -> CopyName | None:
    """The copy at ``path`` (relative to the user's sandbox, as ``list`` gives it), or None
    for any other file."""
    head, _, base = path.rpartition(f"{CONFLICT_DIR}/")
    if head and not (head.startswith(f"{SESSIONS_DIR}/") and head.count("/") == 2):
        return None
    try:
        copy = parse_name(f"{head}{base}")
    except InvalidCopyNameError:
        return None
    return copy if copy.path == path else None


def newest_first(copies: Sequence[CopyName]) -> list[CopyName]:
    return sorted(copies, key=lambda c: (c.saved_at, c.name), reverse=True)


def preview_of(text: str, current: str | None = None) -> str:
    """What the copy changed: its first :data:`PREVIEW_LINES` non-blank lines that
    ``current`` (the DB copy of its file) does not have; its first lines when there are
    none or ``current`` is None. At most :data:`PREVIEW_CHARS` characters. (Every copy of a
    file starts with the same template header, so its first lines tell no two apart.)"""
    lines = text.splitlines()
    if current is not None:
        theirs = set(current.splitlines())
        changed = [line for line in lines if line.strip() and line not in theirs]
        lines = changed or lines
    return "\n".join(lines[:PREVIEW_LINES])[:PREVIEW_CHARS]


def size_of(text: str) -> int:
    """The copy's size in bytes: an undecodable file's own bytes, else its UTF-8 text."""
    if isinstance(text, Undecodable):
        return len(text.data)
    return len(text.encode("utf-8", "surrogatepass"))


def check_page(offset: int, limit: int) -> None:
    """The page's bounds, the same for every transport (REST's query, MCP's listing URI,
    the command's options): an offset fits an integer column, as every number stored."""
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, got {offset}")
    if offset > MAX_INT:
        raise ValueError(f"offset must be from 0 to {MAX_INT}, got {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be from 1 to {MAX_PAGE}, got {limit}")


async def list_copies(
    sandboxes: SandboxProvider,
    user_id: str,
    *,
    kind: FileKind | None = None,
    offset: int = 0,
    limit: int = DEFAULT_PAGE,
    db: AsyncStore | None = None,
) -> CopyPage:
    """One page of ``user_id``'s copies (of ``kind``'s file only, when given), newest first.
    ``db``: where the DB copies are, for each preview to show what its copy changed (one
    read per file on the page; without it, or when a read fails, a preview is the copy's
    first lines: the CLI lists the copies with no database)."""
    check_page(offset, limit)
    sandbox = open_sandbox(sandboxes, user_id, None)
    try:
        paths = [
            *await sandbox.list(f"{CONFLICT_DIR}/"),
            *await sandbox.list(f"{SESSIONS_DIR}/"),
        ]
    except Exception as exc:
        _failed(exc, user_id, "list")
        shown = f"the sandbox could not be listed ({_kind(exc)}): kept-aside copies cannot be shown"
        return CopyPage([], None, offset, limit, "sandbox_failed", [f"{shown}; {_LATER}"])
    found = (name_of_path(path) for path in paths)
    matching = newest_first([c for c in found if c and (kind is None or c.kind is kind)])
    page = matching[offset : offset + limit]
    stored = await _stored(db, user_id, {copy.kind for copy in page})
    gate = asyncio.Semaphore(READS_AT_ONCE)
    read = await asyncio.gather(
        *(_summary(sandbox, user_id, copy, gate, stored.get(copy.kind)) for copy in page)
    )
    summaries = [s for s, _ in read if s is not None]
    total = len(matching) - (len(page) - len(summaries))  # less those dismissed meanwhile
    errors = [e for _, e in read if e is not None]
    if not errors:
        return CopyPage(summaries, total, offset, limit)
    unread = f"{len(errors)} of the copies could not be read ({_kind(errors[0])}); {_LATER}"
    return CopyPage(summaries, total, offset, limit, "sandbox_failed", [unread])


async def _stored(db: AsyncStore | None, user_id: str, kinds: set[FileKind]) -> dict[FileKind, str]:
    """The DB copy of each of ``kinds`` that can be read: a file not there, or a database
    that fails, leaves its copies' previews at their first lines (logged, never an error)."""
    if db is None:
        return {}

    async def one(kind: FileKind) -> str | None:
        try:
            file = await db.get(user_id, kind)
        except Exception as exc:
            log_failure(
                logger, "conflicts.db_copy_unread", exc, user_id=user_id, file=kind.filename
            )
            return None
        return None if file is None else file.content

    ordered = sorted(kinds, key=lambda k: k.filename)
    texts = await asyncio.gather(*(one(kind) for kind in ordered))
    return {kind: text for kind, text in zip(ordered, texts, strict=True) if text is not None}


async def _summary(
    sandbox: Sandbox,
    user_id: str,
    copy: CopyName,
    gate: asyncio.Semaphore,
    current: str | None,
) -> tuple[CopySummary | None, Exception | None]:
    """The copy's summary (None: dismissed since it was listed), or the failure to read it;
    ``current``: the DB copy of its file, for the preview."""
    async with gate:
        try:
            text = await _read(sandbox, copy)
        except Exception as exc:
            _failed(exc, user_id, "read", copy.name)
            return CopySummary(copy, None, None), exc
    if text is None:
        return None, None
    return CopySummary(copy, size_of(text), preview_of(text, current)), None


async def read_copy(
    sandboxes: SandboxProvider, user_id: str, name: str, *, listing: str = REST_LISTING
) -> CopyText:
    """The copy ``name`` of ``user_id``, whole; ``UnknownCopyError`` when there is none."""
    copy = parse_name(name, listing=listing)
    sandbox = open_sandbox(sandboxes, user_id, None)
    try:
        text = await _read(sandbox, copy)
    except Exception as exc:
        _failed(exc, user_id, "read", name)
        raise CopiesUnavailableError(
            f"the copy could not be read from the sandbox ({_kind(exc)}); {_LATER}"
        ) from exc
    if text is None:
        raise _unknown(name, listing)
    return CopyText(copy, str(text), size_of(text), isinstance(text, Undecodable))


async def dismiss_copy(
    sandboxes: SandboxProvider, user_id: str, name: str, *, listing: str = REST_LISTING
) -> CopyName:
    """Delete the copy ``name`` of ``user_id`` (the user has seen it and lets it go);
    ``UnknownCopyError`` when there is none, so a second dismissal says so."""
    copy = parse_name(name, listing=listing)
    sandbox = open_sandbox(sandboxes, user_id, None)
    try:
        there = await sandbox.exists(copy.path)
        if there:
            await sandbox.delete(copy.path)
    except Exception as exc:
        _failed(exc, user_id, "delete", name)
        raise CopiesUnavailableError(
            f"the copy could not be dismissed: the sandbox failed ({_kind(exc)}); {_LATER}"
        ) from exc
    if not there:
        raise _unknown(name, listing)
    log_event(logger, "conflicts.dismissed", user_id=user_id, name=name)
    return copy


async def _read(sandbox: Sandbox, copy: CopyName) -> str | None:
    try:
        return await sandbox.read_text(copy.path)
    except SandboxEncodingError as exc:
        return exc.text  # a copy the DB refused for not being text: its bytes, as text


def _unknown(name: str, listing: str) -> UnknownCopyError:
    return UnknownCopyError(
        f"no kept-aside copy named {name[:_SHOWN_CHARS]!r}: it was dismissed already, or "
        f"never kept; {listing} lists the copies there are"
    )


def _failed(exc: Exception, user_id: str, operation: str, name: str | None = None) -> None:
    log_failure(
        logger, "conflicts.sandbox_failed", exc, user_id=user_id, operation=operation, name=name
    )


def _kind(exc: Exception) -> str:
    # The type only: a sandbox's message may hold its host paths, which are the log's.
    return type(exc).__name__
