"""What a tool answers the model for each sync outcome (pure)."""

from __future__ import annotations

import pytest

from memstrata.agent.answers import sync_message
from memstrata.sandbox.sync import Outcome, SyncResult


@pytest.mark.parametrize(
    ("outcome", "stale", "message", "failed"),
    [
        (Outcome.WRITTEN, False, "Done (version 4).", False),
        (
            Outcome.UNCHANGED,
            True,
            "Done (version 4). The workspace copy could not be updated; it is refreshed next "
            "session.",
            False,
        ),
        (
            Outcome.MERGED,
            False,
            "Done (version 4), merged with an edit the user made at the same time.",
            False,
        ),
        (
            Outcome.DB_UNAVAILABLE,
            False,
            "Done in the workspace; storage is unreachable, it will be saved later.",
            False,
        ),
        (
            Outcome.DB_UNAVAILABLE,
            True,
            "error: USER.md could not be saved: storage is unreachable. Try again later.",
            True,
        ),
        (
            Outcome.CONFLICT,
            False,
            "Not saved: the user edited USER.md at the same time and the edits overlap. Their "
            "version was kept (why). Read USER.md again and reapply your change if it is still "
            "needed.",
            True,
        ),
        (Outcome.REJECTED, False, "error: USER.md was not saved: why", True),
        (
            Outcome.SANDBOX_FAILED,
            False,
            "Done in the workspace; syncing it failed and is retried at the end of the round.",
            False,
        ),
        (Outcome.PUSHED, False, "Done (version 4).", False),
    ],
)
def test_sync_message_for_every_outcome(
    outcome: Outcome, stale: bool, message: str, failed: bool
) -> None:
    result = SyncResult("USER.md", "sandbox->db", outcome, 4, "why")
    answer = sync_message("Done", result, workspace_stale=stale)
    assert answer == message
    assert answer.failed is failed


@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        (Outcome.DB_UNAVAILABLE, "storage is unreachable"),
        (Outcome.SANDBOX_FAILED, "syncing the workspace copy failed"),
    ],
)
def test_without_rounds_a_change_the_db_missed_is_an_error_not_to_repeat(
    outcome: Outcome, why: str
) -> None:
    """MCP binds its tools with ``rounds=False``: no round end will store the copy later."""
    result = SyncResult("MEMORY.md", "sandbox->db", outcome)
    with_rounds = sync_message("Recorded", result)
    assert not with_rounds.startswith("error:") and not with_rounds.failed
    without = sync_message("Recorded", result, rounds=False)
    assert without.failed
    assert without == (
        f"error: MEMORY.md is not stored yet: {why}. The change is kept in the workspace "
        "copy and is stored by the next memory tool call on MEMORY.md; do not repeat it."
    )
