"""The memory tools as the agent-tool tests use them: bound to ``USER``'s sandbox in an
open session and round, with a clock a test can move on (``tests/agent/conftest.py`` makes
``clock`` and ``tools`` fixtures of them), and a file set as the memory settings page saves
it."""

from __future__ import annotations

from datetime import date

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER

DAY = date(2026, 3, 1)

FULL_MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Chose PostgreSQL 15 for billing.
- 2026-02-02: Weekly syncs on Tuesday.

## Ongoing
- 2026-02-03: Migrating billing (deadline: March).
- 2026-02-04: Reviewing vendor contract 49.
  It runs out in June.

## Lessons
- 2026-02-05: Ask before deleting data.
"""


class Day:
    """A clock the test moves on."""

    def __init__(self) -> None:
        self.today = DAY

    def __call__(self) -> date:
        return self.today


@pytest.fixture
def clock() -> Day:
    return Day()


@pytest.fixture
async def tools(sync: SyncService, user_box: LocalDirectorySandbox, clock: Day) -> MemoryTools:
    await sync.start_session(USER)
    tracker = await sync.begin_round(USER)
    return MemoryTools(ToolContext.bind(USER, sync, user_box, tracker=tracker), today=clock)


async def given(sync: SyncService, kind: FileKind, content: str) -> int:
    """The user's file set to ``content`` as the memory settings page saves it."""
    return (await sync.frontend_edit(USER, kind, content)).version
