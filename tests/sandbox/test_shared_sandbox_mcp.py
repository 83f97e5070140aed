"""An MCP memory tool's write on the user's sandbox counts every open session start there
as another session's (``ReadBackMarks.another_holds`` with ``mine=False``).

An MCP call carries no session of its own: memstrata cannot tell whether the agent calling
it is the agent of one of those starts. Counting each start as another's is the safe
mistake — the write keeps the copies a start's agent may have read, so that agent's later
whole-file write of an older copy is merged from it, never stored over the person's edit and
the MCP entry. What it costs when the MCP client *is* that agent: its later change of a line
a push brought conflicts (kept aside) until the session closes.

Real database, real directory sandboxes, the real runtime (BM25 only); the tool context is
bound as ``mcp.agent_tools`` binds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.results import open_sandbox
from tests.sandbox.test_shared_sandbox_writes import AGENT, ENTRY, HUMAN, TOKENS, USER, kept_aside


def test_an_mcp_write_keeps_the_copy_an_open_sessions_agent_read(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()

    async def run() -> None:
        reader = await mem.open_agent_session(USER, token_limit=TOKENS)
        copy = mem.sandbox_directory(USER) / FileKind.MEMORY.filename
        read_by_reader = copy.read_text()
        stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
        await mem.sync.frontend_edit(
            USER, FileKind.MEMORY, stored.content + HUMAN + "\n", stored.version
        )
        sandbox = open_sandbox(mem.sandboxes, USER, None)
        context = ToolContext.bind(USER, mem.sync, sandbox, rounds=False)
        answer = await MemoryTools(context).call("record_memory", {"content": ENTRY})
        assert not answer.failed, answer
        copy.write_text(read_by_reader + AGENT + "\n")  # composed before both writes
        reader.on_tool_call("write_file", {"path": FileKind.MEMORY.filename})

        await reader.end_round()

        content = (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content
        assert (HUMAN in content, ENTRY in content) == (True, True), content
        assert AGENT in content or any(AGENT in text for text in await kept_aside(mem))
        reader.close()

    asyncio.run(run())
