"""The level of ``mcp.tool cancelled=true``: INFO when the call's client went away (not a
server fault, as REST logs a client that hung up first: ``http.request`` 499 at INFO),
WARNING when the server's shutdown cut the call off.
Before, every cancelled call was a WARNING, so each client timeout looked like a fault.

A real ``memstrata serve`` (JSON logs at INFO); the official SDK client over real HTTP in
both of its eras (the 2026 wire, whose hang-up cancels the call, and sessions, which the
client ends as it leaves); the embedding API's fault-injection fake in its slow mode, so a
``record_memory`` waits for the embedding of its file's passages as long as the test needs.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.cli.test_shutdown_grace import serving
from tests.mcp.served import SECRET, bearer
from tests.retrieval.fault_server import FaultServer
from tests.served import Served
from tests.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

MODES = ["auto", "legacy"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


async def record_then(
    served: Served, fake: FaultServer, user: str, mode: str, *, stop: bool
) -> None:
    """A ``record_memory`` call; once its embedding is under way the client leaves (its
    call cancelled, its connections closed) or, ``stop``, the server gets SIGTERM."""
    try:
        async with (
            httpx2.AsyncClient(headers=bearer(user), timeout=60) as http,
            Client(
                streamable_http_client(f"{served.url}/mcp", http_client=http), mode=mode
            ) as client,
        ):
            await client.list_tools()
            asked = len(fake.requests)
            fake.mode = "slow"
            call = asyncio.create_task(client.call_tool("record_memory", {"content": "Kayaks"}))
            deadline = time.monotonic() + 10
            while len(fake.requests) == asked and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert len(fake.requests) > asked, "the tool call never called the embedding API"
            if stop:
                served.process.send_signal(signal.SIGTERM)
                await asyncio.wait([call], timeout=60)
                assert call.done() and call.exception() is not None  # the shutdown's refusal
            else:
                call.cancel()
    except* httpx2.ConnectError:
        pass  # the client's goodbye (its GET stream, its DELETE) finds the server stopped


def cancelled_calls(served: Served) -> list[dict[str, Any]]:
    return [e for e in served.events("mcp.tool") if e.get("cancelled")]


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_whose_client_left_is_logged_at_info(
    tmp_path: Path, pg_url: str, fake: FaultServer, mode: str
) -> None:
    fake.delay_s = 4.0  # per text
    with serving(tmp_path, pg_url, fake, 5, secret=SECRET) as served:
        await record_then(served, fake, f"left-{mode}", mode, stop=False)
        wait_for(lambda: cancelled_calls(served), 15, served.stderr)
        [call] = cancelled_calls(served)
    assert (call["tool"], call["user_id"]) == ("record_memory", f"left-{mode}")
    assert (call["level"], call["client_gone"]) == ("info", True), call


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_cut_off_by_the_shutdown_stays_a_warning(
    tmp_path: Path, pg_url: str, fake: FaultServer, mode: str
) -> None:
    fake.delay_s = 6.0  # per text: past the 1 s grace
    with serving(tmp_path, pg_url, fake, grace_s=1, secret=SECRET) as served:
        await record_then(served, fake, f"cut-{mode}", mode, stop=True)
        assert served.process.wait(timeout=30) == 0, served.stderr()
        [call] = cancelled_calls(served)
    assert (call["tool"], call["user_id"]) == ("record_memory", f"cut-{mode}")
    assert (call["level"], call["client_gone"]) == ("warning", False), served.stderr()
