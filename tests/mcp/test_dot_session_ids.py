"""MCP's ``conversation_index_turn`` refuses ``.`` and ``..`` as session ids by the one rule
(``retrieval.session_ids``), as REST does (tests/api/test_dot_session_ids.py)."""

from __future__ import annotations

import pytest

from memstrata.retrieval.session_ids import SESSION_ID_HINT
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import refused

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("session_id", ["..", "."])
async def test_a_dot_session_id_is_refused(
    connect: ClientFactory, mem: Memstrata, session_id: str
) -> None:
    turn = {"session_id": session_id, "turn_index": 0, "user_message": "hi"}
    async with connect("alice") as client:
        said = await refused(client, "conversation_index_turn", turn)
    assert said == (
        f"error: invalid session_id {session_id!r}: '.' and '..' are path segments (the "
        f"current and the parent directory), not names; {SESSION_ID_HINT}"
    )
    assert mem.search.search("alice", "hi", top_k=5).hits == []
