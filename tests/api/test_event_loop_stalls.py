"""One user's heavy request must not stop ``memstrata serve``'s event loop.

Each test sends one request at the input limits — a 256 KB memory file that costs the
Markdown reader ~0.4 s, or two edits of one ~230 KB file the three-way merge spends its
whole deadline on — and probes the server's loop meanwhile (:mod:`tests.loop_lag`): the
worst lateness of a 5 ms sleep there is how long every other user's request (a search,
a health probe) would have waited. That work runs on a worker thread, so the lag stays
a small part of the request's own time; run on the loop, it was most of it.

The app runs with uvicorn on a thread and loop of its own, over the real PostgreSQL; MCP
goes through the official client over streamable HTTP. The runtimes use the real local
embedding server where the file written is not indexed (SOUL.md), and search BM25 only
where a 256 KB MEMORY.md is written: embedding it takes a minute of this machine's CPU,
on worker threads and the embedding server, none of it on the loop.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memstrata.api import create_app
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.runtime import Memstrata
from tests.api.conftest import TokenFactory
from tests.loop_lag import LagProbe, costly_markdown, probing, serve_on_own_loop

pytestmark = pytest.mark.anyio

SOUL = "/api/config/agent-files/soul"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hybrid(open_runtime: Callable[..., Memstrata], embedder: OpenAICompatibleEmbedder) -> Memstrata:
    return open_runtime(embedder)


@pytest.fixture
def bm25(open_runtime: Callable[..., Memstrata]) -> Memstrata:
    return open_runtime()


def store(mem: Memstrata, user: str, kind: FileKind, content: str) -> None:
    mem.store.provision_default_files(user)
    current = mem.store.get_memory_file(user, kind)
    assert current is not None
    mem.store.upsert_memory_file(user, kind, content, expected_version=current.version)


def assert_loop_kept_moving(probe: LagProbe, took_s: float) -> None:
    # Relative, so a slow or loaded machine slows both sides alike: work on the loop stalls
    # it for most of the request (0.5-0.9 of it measured), work on a thread for a few ms.
    assert probe.worst_s < took_s / 4, (
        f"the event loop stood still for {probe.worst_s * 1000:.0f} ms of a "
        f"{took_s * 1000:.0f} ms request"
    )


@asynccontextmanager
async def mcp_session(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


async def test_the_memory_prompt_is_built_off_the_loop(
    hybrid: Memstrata, make_token: TokenFactory
) -> None:
    """MCP ``prompts/get``: the system prompt's cut of a 256 KB SOUL.md."""
    store(hybrid, "ada", FileKind.SOUL, costly_markdown())
    with serve_on_own_loop(create_app(memstrata=hybrid)) as server:
        async with mcp_session(server.url, make_token("ada")) as client:
            with server.lag() as probe:
                started = time.perf_counter()
                prompt = await client.get_prompt("memory_context", {"token_limit": "32000"})
                took = time.perf_counter() - started
    assert "truncated: SOUL.md" in (prompt.description or "")
    assert_loop_kept_moving(probe, took)


async def test_an_agent_session_builds_its_prompt_off_the_loop(hybrid: Memstrata) -> None:
    """The library's session start (``open_agent_session``), awaited on the caller's loop."""
    store(hybrid, "ada", FileKind.SOUL, costly_markdown())
    await hybrid.open_agent_session("ada", token_limit=32_000)  # the sandbox filled first
    async with probing() as probe:
        started = time.perf_counter()
        session = await hybrid.open_agent_session("ada", token_limit=32_000)
        took = time.perf_counter() - started
    session.close()
    assert session.prompt.truncated == ("SOUL.md",)
    assert_loop_kept_moving(probe, took)


async def test_memory_write_checks_its_content_off_the_loop(
    hybrid: Memstrata, make_token: TokenFactory
) -> None:
    """MCP ``memory_write``: the open-fence check reads the whole new text."""
    with serve_on_own_loop(create_app(memstrata=hybrid)) as server:
        async with mcp_session(server.url, make_token("ada")) as client:
            read = await client.call_tool("memory_read", {"name": "soul"})
            assert read.structured_content is not None
            version = read.structured_content["version"]
            # replace_all: the text replaces the template's persona (memory_write refuses to
            # remove most of a file without it).
            arguments = {
                "name": "soul",
                "content": costly_markdown(),
                "expected_version": version,
                "replace_all": True,
            }
            with server.lag() as probe:
                started = time.perf_counter()
                written = await client.call_tool("memory_write", arguments)
                took = time.perf_counter() - started
    assert not written.is_error, written.content
    assert_loop_kept_moving(probe, took)


async def test_record_memory_edits_a_large_file_off_the_loop(
    bm25: Memstrata, make_token: TokenFactory
) -> None:
    """MCP ``record_memory`` on a 256 KB MEMORY.md: the edit reads the file's sections."""
    store(bm25, "ada", FileKind.MEMORY, costly_markdown())
    with serve_on_own_loop(create_app(memstrata=bm25)) as server:
        async with mcp_session(server.url, make_token("ada")) as client:
            with server.lag() as probe:
                started = time.perf_counter()
                recorded = await client.call_tool("record_memory", {"content": "Likes oolong"})
                took = time.perf_counter() - started
    assert not recorded.is_error, recorded.content
    stored = bm25.store.get_memory_file("ada", FileKind.MEMORY)
    assert stored is not None and "Likes oolong" in stored.content
    assert_loop_kept_moving(probe, took)


@pytest.mark.parametrize(
    "arguments",
    [
        {"content": costly_markdown("- one more\n"), "whole_file": True},
        {"content": costly_markdown(room=2048), "section": "Notes"},  # room for the rest
    ],
    ids=["whole file", "one section"],
)
async def test_update_long_term_memory_checks_its_content_off_the_loop(
    bm25: Memstrata, make_token: TokenFactory, arguments: dict[str, object]
) -> None:
    """MCP ``update_long_term_memory`` with 256 KB of content: its open-fence check."""
    with serve_on_own_loop(create_app(memstrata=bm25)) as server:
        async with mcp_session(server.url, make_token("ada")) as client:
            with server.lag() as probe:
                started = time.perf_counter()
                updated = await client.call_tool("update_long_term_memory", arguments)
                took = time.perf_counter() - started
    assert not updated.is_error, updated.content
    assert_loop_kept_moving(probe, took)


async def test_a_put_merging_an_agent_edit_merges_off_the_loop(
    hybrid: Memstrata, make_token: TokenFactory
) -> None:
    """REST PUT while the user's sandbox holds an agent edit not read back yet: the mirror
    merges the two edits (and, shuffled as here, keeps the agent's copy aside)."""
    lines = [f"fact {i} distinct" for i in range(12_000)]

    def shuffled(seed: int) -> str:
        copy = lines[:]
        random.Random(seed).shuffle(copy)
        return "\n".join(copy)

    headers = {"Authorization": f"Bearer {make_token('ada')}"}
    with serve_on_own_loop(create_app(memstrata=hybrid)) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
            first = (await http.get(SOUL)).json()
            body = {"content": "\n".join(lines), "expected_version": first["version"]}
            base = await http.put(SOUL, json=body)  # also the sandbox's copy and base
            assert base.status_code == 200, base.text
            sandbox = hybrid.sandboxes.for_user("ada")
            await sandbox.write_text("SOUL.md", shuffled(1))  # the agent's edit
            body = {"content": shuffled(2), "expected_version": base.json()["version"]}
            with server.lag() as probe:
                started = time.perf_counter()
                put = await http.put(SOUL, json=body)
                took = time.perf_counter() - started
    assert put.status_code == 200, put.text
    assert await sandbox.list(".memstrata/conflicts/SOUL.md")  # merged, found conflicting
    assert_loop_kept_moving(probe, took)
