"""``MEMSTRATA_PROMPT_FLOOR_SHARE`` reaches the prompt both ways a host gets it: the
library's ``open_agent_session`` and MCP's ``memory_context``. Unset, both keep the spec's
strict priority order (a USER.md larger than the budget leaves MEMORY.md out, named by the
note); at 0.125 MEMORY.md keeps a floor of its own beside the cut USER.md."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.tokenize import count_tokens
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.prompt_files import MEMORY_MD, NEWEST, USER_MD

USER = "floor-user"

pytestmark = pytest.mark.anyio


def _runtime(settings: Settings, db: Database, share: float | None) -> Memstrata:
    if share is not None:
        settings = settings.model_copy(update={"prompt_floor_share": share})
    mem = Memstrata.open(settings, database=db)
    mem.store.provision_default_files(USER)
    mem.store.upsert_memory_file(USER, FileKind.USER, USER_MD)
    mem.store.upsert_memory_file(USER, FileKind.MEMORY, MEMORY_MD)
    return mem


@pytest.mark.parametrize(
    ("share", "truncated", "dropped"),
    [(None, ["USER.md"], ["MEMORY.md"]), (0.125, ["USER.md", "MEMORY.md"], [])],
    ids=["default", "0.125"],
)
async def test_the_floor_share_reaches_the_library_and_mcp_prompts(
    settings: Settings,
    db: Database,
    connect: ClientFactory,
    share: float | None,
    truncated: list[str],
    dropped: list[str],
) -> None:
    mem = _runtime(settings, db, share)
    try:
        session = await mem.open_agent_session(USER, token_limit=32000)
        session.close()
        async with connect(USER, runtime=mem) as client:
            served = await client.get_prompt("memory_context", {"token_limit": "32000"})
    finally:
        mem.close()
    library = session.prompt
    assert (list(library.truncated), list(library.dropped)) == (truncated, dropped)
    assert count_tokens(library.text) == library.tokens <= library.budget == 4800
    meta = served.meta or {}
    assert (meta["truncated"], meta["dropped"]) == (truncated, dropped)
    text = served.messages[0].content.text  # type: ignore[union-attr]
    assert count_tokens(text) == meta["tokens"] <= meta["budget"] == 4800
    for prompt in (library.text, text):
        if dropped:  # left out whole, and named
            assert NEWEST not in prompt
            assert "[left out for lack of room: MEMORY.md (" in prompt
        else:  # its newest entry, within its floor of 600 tokens
            memory = prompt.split('<file name="MEMORY.md">', 1)[1]
            assert NEWEST in memory and count_tokens(memory) <= 600


def test_the_setting_is_read_from_the_environment_within_0_to_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings(environment="test").prompt_floor_share == 0.0
    monkeypatch.setenv("MEMSTRATA_PROMPT_FLOOR_SHARE", "0.125")
    assert Settings(environment="test").prompt_floor_share == 0.125
    for wrong in ("0.6", "-0.1"):
        monkeypatch.setenv("MEMSTRATA_PROMPT_FLOOR_SHARE", wrong)
        with pytest.raises((ValidationError, ValueError), match="prompt_floor_share"):
            Settings(environment="test")
