"""The entry tools driven as a model drives them, through the SDK's in-process client on the
real runtime: a bulleted entry, a correction of one item and its retry, a misspelled
section and the markup a model types, each answered with the right ``isError``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import stored, text

pytestmark = pytest.mark.anyio


async def test_a_models_walkthrough_of_the_entry_tools(
    connect: ClientFactory, mem: Memstrata
) -> None:
    today = datetime.now(UTC).date().isoformat()
    calls = [
        ("record_memory", {"content": "- Likes A\n- Likes B\n- Likes C", "section": "Lessons"}),
        ("record_memory", {"content": "Likes B2", "replaces": "Likes B"}),
        ("record_memory", {"content": "Likes B2", "replaces": "Likes B"}),
        ("record_memory", {"content": f"- {today}: Uses vim", "section": "lessons"}),
        ("record_memory", {"content": "Weekly syncs", "section": "Decision"}),
        ("update_user", {"section": "Profile", "key": "**Name**", "content": "- Ivan"}),
        ("update_user", {"section": "Profil", "key": "Name", "content": "Bobby"}),
    ]
    async with connect("alice") as client:
        results = [await client.call_tool(name, arguments) for name, arguments in calls]
    answers = [(r.is_error, text(r)) for r in results]

    assert answers[0] == (False, "Recorded 3 entries in MEMORY.md under ## Lessons (version 2).")
    assert answers[1] == (
        False,
        f"Recorded in MEMORY.md under ## Lessons and removed the entry '{today}: Likes B' "
        "(version 3).",
    )
    assert answers[2] == (
        False,
        f"No change: MEMORY.md already holds this under ## Lessons ({today}), and no entry "
        "matches replaces any more.",
    )
    assert answers[3] == (False, "Recorded in MEMORY.md under ## Lessons (version 4).")
    assert answers[4][0] and "did you mean ## Decisions? Pass section='Decisions'" in answers[4][1]
    assert answers[5] == (False, "Set Name under ## Profile in USER.md (version 2).")
    assert answers[6] == (
        True,
        "error: USER.md has no ## Profil, and Name is set under ## Profile ('Name: Ivan'); to "
        "change it, pass section='Profile'. To add ## Profil with a Name of its own, pass "
        "new_section=true; nothing was written",
    )
    memory_md = (stored(mem, "alice", FileKind.MEMORY) or ("", 0))[0]
    assert memory_md.endswith(
        f"## Lessons\n- {today}: Likes A\n- {today}: Likes C\n- {today}: Likes B2\n"
        f"- {today}: Uses vim\n"
    )
    user_md = (stored(mem, "alice", FileKind.USER) or ("", 0))[0]
    assert "- Name: Ivan\n" in user_md and "Profil\n" not in user_md and "**" not in user_md


async def test_a_models_invented_today_is_kept_in_the_text_of_an_entry_dated_today(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """A model whose knowledge ends in 2024 dates what it records 2024-05-01; yesterday's
    meeting, typed with yesterday's date, keeps it."""
    now = datetime.now(UTC).date()
    today, yesterday = now.isoformat(), (now - timedelta(days=1)).isoformat()
    async with connect("alice") as client:
        invented = await client.call_tool(
            "record_memory", {"content": "2024-05-01: Started the job", "section": "Work"}
        )
        recent = await client.call_tool(
            "record_memory", {"content": f"{yesterday}: Met Ana", "section": "Work"}
        )
    assert not invented.is_error and not recent.is_error
    assert text(invented) == (
        "Recorded in MEMORY.md under ## Work (version 2). New section: MEMORY.md had no "
        "## Work (its sections: Decisions, Ongoing, Lessons). Note: today is "
        f"{today}, so the entry is dated today, and 2024-05-01 (more than 31 days ago) stays "
        "in its text."
    )
    assert text(recent) == "Recorded in MEMORY.md under ## Work (version 3)."
    memory_md = (stored(mem, "alice", FileKind.MEMORY) or ("", 0))[0]
    assert memory_md.endswith(
        f"## Work\n- {today}: 2024-05-01: Started the job\n- {yesterday}: Met Ana\n"
    )
