"""What a host is told by the sync of an agent session, through ``open_agent_session``.

* An earlier session of the user's, closed since, is read back by the next session start;
  when its agent's edit conflicted with the user's, the copy was kept aside and only the
  log and the listing said so: ``start_results`` held the new session's own results alone.
  They now come first, tagged ``closed_session``.
* A round end after the user was erased said ``unchanged`` for files that no longer exist
  anywhere; it now says ``erased``.

Real database, real directory sandboxes, the real runtime (BM25 only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from memstrata.memory.conflicts import list_copies
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.results import Outcome

USER = "ada"
TOKENS = 32_000


def test_a_closed_sessions_conflict_is_in_the_next_starts_results(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()

    async def run() -> None:
        first = await mem.open_agent_session(USER, token_limit=TOKENS, session_id="conv-1")
        copy = mem.sandbox_directory(USER, "conv-1") / "MEMORY.md"
        copy.write_text(copy.read_text().replace("## Ongoing", "## Ongoing (agent)"))
        first.close()  # no round end saw the shell edit: the next start reads it back
        stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
        human = stored.content.replace("## Ongoing", "## Ongoing (human)")
        await mem.sync.frontend_edit(USER, FileKind.MEMORY, human, stored.version)

        second = await mem.open_agent_session(USER, token_limit=TOKENS, session_id="conv-2")
        second.close()

        results = second.start_results
        earlier = [(r.closed_session, r.filename, r.outcome) for r in results[:3]]
        assert earlier == [
            ("conv-1", "SOUL.md", Outcome.UNCHANGED),
            ("conv-1", "USER.md", Outcome.UNCHANGED),
            ("conv-1", "MEMORY.md", Outcome.CONFLICT),
        ]
        assert "the agent's copy was saved to .memstrata/conflicts/MEMORY.md." in (
            results[2].detail or ""
        )
        own = [(r.closed_session, r.filename) for r in results[3:]]
        assert own == [(None, k.filename) for k in USER_FILE_KINDS] + [(None, "AGENTS.md")]
        page = await list_copies(mem.sandboxes, USER)
        assert [(c.copy.session_dir, c.copy.reason) for c in page.copies] == [
            ("conv-1", "conflict")
        ]
        assert "(human)" in (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content

    asyncio.run(run())


def test_a_start_with_no_closed_session_returns_its_own_results_alone(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()

    async def run() -> None:
        session = await mem.open_agent_session(USER, token_limit=TOKENS, session_id="conv-1")
        session.close()
        assert [r.closed_session for r in session.start_results] == [None] * 4

    asyncio.run(run())


def test_a_round_end_after_the_user_was_erased_says_erased(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()

    async def run() -> None:
        session = await mem.open_agent_session(USER, token_limit=TOKENS, session_id="conv-1")
        await asyncio.to_thread(mem.erase_user, USER)
        session.on_tool_call("write_file", {"path": "MEMORY.md"})

        results = await session.end_round()
        session.close()

        assert [(r.filename, r.direction, r.outcome, r.version) for r in results] == [
            (k.filename, "none", Outcome.ERASED, None) for k in USER_FILE_KINDS
        ]
        assert {r.detail for r in results} == {
            "the user was erased since the round began: nothing read back"
        }
        assert not await asyncio.to_thread(mem.holds_user, USER)  # nothing brought back

    asyncio.run(run())


def test_a_round_end_after_an_agent_removed_a_file_still_restores_it(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """Not erased: the stored file is there, so a missing sandbox copy is restored."""
    mem = open_runtime()

    async def run() -> None:
        session = await mem.open_agent_session(USER, token_limit=TOKENS)
        (mem.sandbox_directory(USER) / "MEMORY.md").unlink()
        session.on_tool_call("write_file", {"path": "MEMORY.md"})
        results = {r.filename: r.outcome for r in await session.end_round()}
        session.close()
        assert results["MEMORY.md"] is Outcome.RESTORED
        assert Outcome.ERASED not in results.values()

    asyncio.run(run())
