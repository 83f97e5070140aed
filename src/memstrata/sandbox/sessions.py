"""Which session sandboxes of each user are open, and which closed ones still wait for a
read-back.

A frontend edit is pushed to the open ones (``SyncService.open_sessions``); the closed ones
are read back by the user's next session start (``SyncService.end_session``), so that an
edit made in a session's last round that no read-back saw (a shell ``echo >> MEMORY.md``)
reaches the DB. Two records say which, one per reach:

* in this process, :class:`SessionRegistry`: the sessions this ``SyncService`` started and
  has not ended, and those it ended since the user's last start. Updated from the threads
  of every loop using the service: each change is made whole under one mutex.
* across processes and restarts, :class:`ReadBackMarks`, when the provider has the
  ``SessionHoldingProvider`` hook (the local provider does): each start of a session
  *holds* it open (released when that start's session ends, or when its process dies,
  however it dies) and leaves a *mark* in the user's sandbox,
  ``.memstrata/read-back/<session dir>.json`` (``{"session_id": "..."}``). The user's
  next session start in any process — a restart, another replica sharing the sandbox root
  — reads back each marked session that it can *claim*, and removes the mark once that
  read-back settled.

"Open" across processes is that hold: a session is open while some live process that
started it has not ended it. A claim fails while any process holds it, so a session open
elsewhere is never read back under its agent; its mark stays for a later start. A session
whose process died while it was open counts as closed: its last edits are read back too.
A start looks at no more than :data:`MAX_READ_BACKS_PER_START` marks, picked at random so
that marks of sessions open elsewhere cannot hide the others; the rest wait for the next.

Sessions without a session id share the user's own sandbox: each start of one is counted
open in the registry and held the same way (``hold_session(user, None)``: no mark, since
every start reads that sandbox back anyway) until its session ends. A session start, a
controlled write's sync and a round end ask whether *another* session holds their sandbox
(:meth:`ReadBackMarks.another_holds`, the one rule): an agent of that session may have
read a copy an earlier push or write replaced, so the base record then keeps the copies it
names instead of settling them (``results.sharing``). Another start in this process is in
the registry; one in another process fails a claim — or, asked by a session that holds the
sandbox itself, shows in its hold (``holds._Held.others_hold``).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

from memstrata.logs import log_failure
from memstrata.sandbox import holds
from memstrata.sandbox.base import Sandbox, SandboxProvider, SessionHoldingProvider
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.results import Target, sharing
from memstrata.sandbox.state import STATE_DIR
from memstrata.sandbox.timed import TimedSandboxProvider

logger = logging.getLogger("memstrata.sandbox.sync")

# Users whose closed sessions wait for a read-back at their next session start, at most:
# past it the least recently noted are forgotten (their edits stay in the closed session
# directories, as before the read-back existed), so the map cannot grow without bound.
MAX_CLOSED_USERS = 10_000
# Closed sessions one session start reads back at most (each costs three reconciles):
# a start after a crash that left many sessions behind stays short; the rest wait.
MAX_READ_BACKS_PER_START = 8
MARK_DIR = f"{STATE_DIR}/read-back"
# The registry's key for the user's own sandbox (a session id is never empty).
_USER_SANDBOX = ""

Release = Callable[[], None]


def mark_path(session_id: str) -> str:
    return f"{MARK_DIR}/{safe_dir_name(session_id)}.json"


class SessionRegistry:
    """Open and closed sessions per user in this process (module doc); every method is
    thread-safe."""

    def __init__(self) -> None:
        # user -> session id -> how many opened sessions use it: a host that reopens a
        # session id keeps it open until the last of them ends. Updated from the threads
        # of every loop using this service: each change is a read-modify-write of both
        # levels, made whole under the mutex.
        self._mutex = threading.Lock()
        self._open: dict[str, Counter[str]] = {}
        # (user, session id) -> the releases of the holds its open starts took (one each,
        # when held: ``ReadBackMarks.open``), released when the last ends; same mutex.
        self._holds: dict[tuple[str, str], list[Release]] = {}
        # user -> sessions closed since the user's last session start, read back by the
        # next one (``end_session``); under the same mutex.
        # The users least recently noted go first past MAX_CLOSED_USERS: a user who never
        # starts a session again would otherwise be kept for the life of the process.
        self._closed: OrderedDict[str, set[str]] = OrderedDict()

    def began(self, user_id: str, session_id: str | None, hold: Release | None = None) -> None:
        """One start of the session (``None``: one on the user's own sandbox) is open."""
        key = _USER_SANDBOX if session_id is None else session_id
        with self._mutex:
            self._open.setdefault(user_id, Counter())[key] += 1
            if hold is not None:
                self._holds.setdefault((user_id, key), []).append(hold)

    def ended(self, user_id: str, session_id: str | None) -> None:
        """One start of the session ended: closed (noted for a read-back, its holds
        released) once every start of it has ended. The user's own sandbox is never noted:
        every start reads it back."""
        key = _USER_SANDBOX if session_id is None else session_id
        holds: list[Release] = []
        with self._mutex:
            sessions = self._open.get(user_id)
            if sessions is None or key not in sessions:
                return
            sessions[key] -= 1
            if sessions[key] <= 0:
                del sessions[key]
                holds = self._holds.pop((user_id, key), [])
                if session_id is not None:
                    self._note_closed(user_id, session_id)
            if not sessions:
                # Under the mutex: a session starting now must not count in a dropped map.
                del self._open[user_id]
        for hold in holds:
            hold()

    def take_closed(self, user_id: str, starting: str | None) -> list[str]:
        """The sessions of ``user_id`` closed since the last call, forgotten here, but
        ``starting`` and any reopened meanwhile."""
        with self._mutex:
            # One reopened meanwhile is read back by its own round ends and close.
            still_open = set(self._open.get(user_id, ())) | {starting}
            return sorted(self._closed.pop(user_id, set()) - still_open)

    def note_closed(self, user_id: str, session_id: str) -> None:
        """Keep a closed session for the next read-back (its last one failed)."""
        with self._mutex:
            self._note_closed(user_id, session_id)

    def open_sessions(self, user_id: str) -> list[str]:
        """The open session sandboxes (not the user's own)."""
        with self._mutex:  # a copy: another thread may add or drop one meanwhile
            return sorted(set(self._open.get(user_id, ())) - {_USER_SANDBOX})

    def starts(self, user_id: str, session_id: str | None) -> tuple[int, list[Release]]:
        """How many starts of this sandbox's session (``None``: the user's own) are open,
        and the holds they took."""
        key = _USER_SANDBOX if session_id is None else session_id
        with self._mutex:
            count = self._open.get(user_id, Counter())[key]
            return count, list(self._holds.get((user_id, key), ()))

    def _note_closed(self, user_id: str, session_id: str) -> None:
        """Under the mutex."""
        self._closed.setdefault(user_id, set()).add(session_id)
        self._closed.move_to_end(user_id)
        while len(self._closed) > MAX_CLOSED_USERS:
            self._closed.popitem(last=False)


def holding_provider(provider: SandboxProvider) -> SessionHoldingProvider | None:
    """The provider's ``SessionHoldingProvider`` hook, looked for beneath the deadline
    wrapper ``Memstrata.open`` puts around it (as the erasure's hook is)."""
    if isinstance(provider, TimedSandboxProvider):
        provider = provider.inner
    return provider if isinstance(provider, SessionHoldingProvider) else None


class ReadBackMarks:
    """Holds and marks of the sessions of one provider (module doc). Failures are
    warnings: the in-process record still reads a closed session back."""

    def __init__(self, provider: SandboxProvider) -> None:
        self._holder = holding_provider(provider)

    @asynccontextmanager
    async def opening(
        self, box: Sandbox, user_id: str, session_id: str | None
    ) -> AsyncIterator[Release | None]:
        """A starting session held open, then marked in the user's sandbox ``box``: the
        hold's release, for the registry to keep once the start succeeded (released here
        if it fails); None without a session, or when it could not be held (and then no
        mark says it may be read back: no other process could tell it is open). A session
        without an id holds the user's sandbox, unmarked (module doc)."""
        hold = await self._open(box, user_id, session_id)
        try:
            yield hold
        except BaseException:
            if hold is not None:
                hold()
            raise

    async def _open(self, box: Sandbox, user_id: str, session_id: str | None) -> Release | None:
        if self._holder is None:
            return None
        try:
            hold = await self._holder.hold_session(user_id, session_id)
        except Exception as exc:
            log_failure(
                logger, "sync.session_not_held", exc, user_id=user_id, session_id=session_id
            )
            hold = None
        if session_id is None:
            return hold
        try:
            if hold is None:
                await box.delete(mark_path(session_id))
            else:
                await box.write_text(mark_path(session_id), json.dumps({"session_id": session_id}))
        except Exception as exc:
            log_failure(logger, "sync.read_back_mark_failed", exc, user_id=user_id)
        return hold

    async def shared(self, registry: SessionRegistry, t: Target, *, mine: bool) -> Target:
        """``t``, forgetting no copy while another session holds its sandbox open
        (:meth:`another_holds`, ``results.sharing``)."""
        if not await self.another_holds(registry, t.user_id, t.session_id, mine=mine):
            return t
        return replace(t, scenario=sharing(t.scenario))

    async def another_holds(
        self, registry: SessionRegistry, user_id: str, session_id: str | None, *, mine: bool
    ) -> bool:
        """Whether a session other than the caller's holds this sandbox open (module doc).
        ``mine``: the caller is one of the sandbox's open starts in ``registry`` (a round
        tracker of a started session), so its own start and hold do not count."""
        count, held = registry.starts(user_id, session_id)
        own = 1 if mine and count else 0
        if count > own:
            return True  # another start in this process
        if not own or not held:
            return await self._held_elsewhere(user_id, session_id)
        # The caller's own hold fails every claim: its OFD lock tells of the others (a
        # provider's own hold cannot be asked, and only the registry knows).
        return any(holds.others_hold(release) for release in held)

    async def _held_elsewhere(self, user_id: str, session_id: str | None) -> bool:
        """Whether a process (this one through another start, or another) holds the
        sandbox open: a claim of it fails. False without the hook (only the registry
        knows), or when it was never held; True when the claim cannot be tried (keeping
        the copies a start would forget is the safe mistake)."""
        if self._holder is None:
            return False
        try:
            claim = await self._holder.claim_session(user_id, session_id)
        except FileNotFoundError:
            return False
        except Exception as exc:
            log_failure(
                logger, "sync.session_not_claimed", exc, user_id=user_id, session_id=session_id
            )
            return True
        if claim is None:
            return True
        claim()
        return False

    async def read_back(
        self,
        registry: SessionRegistry,
        box: Sandbox,
        user_id: str,
        starting: str | None,
        read_back: Callable[[str], Awaitable[bool]],
    ) -> None:
        """Read back the sessions ``registry`` noted closed and the marked ones, each once
        claimed, but those open here and ``starting`` (whose own start reads it back);
        ``read_back(session_id)`` says whether it settled, and one that did not is noted
        again for the next start."""
        noted = registry.take_closed(user_id, starting)
        skip = {*registry.open_sessions(user_id), *([starting] if starting else [])}
        marked = await self._marked(box, user_id, skip)
        for session_id in dict.fromkeys([*noted, *marked]):
            claim = await self._claim(box, user_id, session_id, gone_too=session_id in noted)
            if claim is None:
                continue  # open in another process (or gone): its mark stays for a later start
            try:
                if not await read_back(session_id):
                    registry.note_closed(user_id, session_id)
                elif self._holder is not None:
                    await self._unmark(box, user_id, session_id)
            finally:
                claim()

    async def _marked(self, box: Sandbox, user_id: str, skip: set[str]) -> list[str]:
        """The sessions of up to ``MAX_READ_BACKS_PER_START`` marks, picked at random
        among those of sessions not in ``skip``."""
        if self._holder is None:
            return []
        try:
            names = set(await box.list(f"{MARK_DIR}/")) - {mark_path(s) for s in skip}
        except Exception as exc:
            log_failure(logger, "sync.read_back_marks_unreadable", exc, user_id=user_id)
            return []
        picked = random.sample(sorted(names), min(len(names), MAX_READ_BACKS_PER_START))
        found = [await self._session_of(box, user_id, name) for name in picked]
        return [session_id for session_id in found if session_id is not None]

    async def _session_of(self, box: Sandbox, user_id: str, name: str) -> str | None:
        """The session a mark names; a mark that names none, or another session than its
        file name says, is removed (one that cannot be read now is left for a later start)."""
        try:
            raw = await box.read_text(name)
        except Exception:
            return None
        try:
            data = json.loads(raw or "null")
        except ValueError:
            data = None
        session_id = data.get("session_id") if isinstance(data, dict) else None
        if isinstance(session_id, str) and session_id and mark_path(session_id) == name:
            return session_id
        await self._unmark_path(box, user_id, name)
        return None

    async def _claim(
        self, box: Sandbox, user_id: str, session_id: str, *, gone_too: bool
    ) -> Release | None:
        """The session held against every start of it while it is read back; None when a
        process holds it open. Without the hook only this process's record is known.
        A session whose sandbox is gone (a host removed it) has nothing to read back: its
        mark goes, unless this process noted it closed (``gone_too``: its sandbox may have
        failed to hold it), which is read back as before."""
        if self._holder is None:
            return _nothing
        try:
            return await self._holder.claim_session(user_id, session_id)
        except FileNotFoundError:
            if gone_too:
                return _nothing
            await self._unmark(box, user_id, session_id)
            return None
        except Exception as exc:
            log_failure(
                logger, "sync.session_not_claimed", exc, user_id=user_id, session_id=session_id
            )
            return None

    async def _unmark(self, box: Sandbox, user_id: str, session_id: str) -> None:
        await self._unmark_path(box, user_id, mark_path(session_id))

    async def _unmark_path(self, box: Sandbox, user_id: str, path: str) -> None:
        try:
            await box.delete(path)
        except Exception as exc:
            log_failure(logger, "sync.read_back_mark_failed", exc, user_id=user_id)


def _nothing() -> None:
    """The release of a claim that holds nothing."""
