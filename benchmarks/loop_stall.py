"""How long one user's heavy request stops the server's event loop, request by request.

The app (``create_app``, MCP at ``/mcp`` included) runs with uvicorn on a thread and loop
of its own over an embedded PostgreSQL in a temporary directory, BM25 only (embedding
runs on worker threads and in the embedding server, never on the loop). For each request
user A sends at the input limits, ``--runs`` times (a fresh user each run), it records
A's request time, the worst lateness of a 5 ms sleep on the server's loop meanwhile
(``tests/loop_lag.py``), and the slowest ``/healthz`` answer another client got while
polling every 10 ms — what every other user's request waited.

    .venv/bin/python benchmarks/loop_stall.py --runs 5

Run it with ``PYTHONPATH`` at another checkout's ``src`` (and its ``docs/sandbox_template``
beside it) to time that code ("before" in docs/BENCHMARKS.md, "Event-loop stalls").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.loop_lag import LoopServer, costly_markdown, serve_on_own_loop

from memstrata.api import create_app
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata

SOUL = "/api/config/agent-files/soul"
MERGE_LINES = [f"fact {i} distinct" for i in range(12_000)]


class HealthPoller:
    """Another client: ``/healthz`` every 10 ms on a thread; ``worst_s`` its slowest."""

    def __init__(self, url: str) -> None:
        self.worst_s = 0.0
        self._url = url
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # A connection per request: on a kept-alive one, uvicorn's second and later answers
        # took ~43 ms each on the reference host (its first 1-9 ms), which would hide a
        # stall of that size.
        close = {"Connection": "close"}
        with httpx.Client(base_url=self._url, headers=close, timeout=60) as client:
            client.get("/healthz")  # not counted: the first request warms the client
            self._ready.set()
            while not self._stop.is_set():
                began = time.perf_counter()
                client.get("/healthz")
                self.worst_s = max(self.worst_s, time.perf_counter() - began)
                self._stop.wait(0.01)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        self._ready.wait(60)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)


class Bench:
    def __init__(self, mem: Memstrata, server: LoopServer) -> None:
        self.mem = mem
        self.server = server
        self.users = 0

    def user(self) -> tuple[str, str]:
        self.users += 1
        user = f"a{self.users}"
        return user, mint_token(self.mem.settings, user, 3600)

    def store(self, user: str, kind: FileKind, content: str) -> None:
        self.mem.store.provision_default_files(user)
        current = self.mem.store.get_memory_file(user, kind)
        assert current is not None
        self.mem.store.upsert_memory_file(user, kind, content, expected_version=current.version)

    async def timed(self, request: Callable[[], Awaitable[Any]]) -> tuple[float, float, float]:
        """(A's request s, worst loop lag s, slowest /healthz s) for one ``request``."""
        with HealthPoller(self.server.url) as poller, self.server.lag() as probe:
            await asyncio.sleep(0.05)  # a few idle answers first
            began = time.perf_counter()
            await request()
            took = time.perf_counter() - began
            await asyncio.sleep(0.02)
        return took, probe.worst_s, poller.worst_s

    async def mcp(
        self, token: str, call: Callable[[Client], Awaitable[Any]]
    ) -> tuple[float, float, float]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(f"{self.server.url}/mcp", http_client=http)) as client,
        ):
            return await self.timed(lambda: call(client))

    async def prompt(self) -> tuple[float, float, float]:
        user, token = self.user()
        self.store(user, FileKind.SOUL, costly_markdown())
        limit = {"token_limit": "32000"}
        return await self.mcp(token, lambda c: c.get_prompt("memory_context", limit))

    async def memory_write(self) -> tuple[float, float, float]:
        user, token = self.user()
        self.store(user, FileKind.SOUL, "# Soul\n")
        version = self.mem.store.get_memory_file(user, FileKind.SOUL).version  # type: ignore[union-attr]
        args = {"name": "soul", "content": costly_markdown(), "expected_version": version}
        return await self.mcp(token, lambda c: c.call_tool("memory_write", args))

    async def record_memory(self) -> tuple[float, float, float]:
        user, token = self.user()
        self.store(user, FileKind.MEMORY, costly_markdown())
        args = {"content": "Likes oolong"}
        return await self.mcp(token, lambda c: c.call_tool("record_memory", args))

    async def whole_file(self) -> tuple[float, float, float]:
        _, token = self.user()
        args = {"content": costly_markdown("- one more\n"), "whole_file": True}
        return await self.mcp(token, lambda c: c.call_tool("update_long_term_memory", args))

    async def merging_put(self) -> tuple[float, float, float]:
        user, token = self.user()
        headers = {"Authorization": f"Bearer {token}"}

        def shuffled(seed: int) -> str:
            copy = MERGE_LINES[:]
            random.Random(seed).shuffle(copy)
            return "\n".join(copy)

        async with httpx.AsyncClient(
            base_url=self.server.url, headers=headers, timeout=120
        ) as http:
            first = (await http.get(SOUL)).json()
            body = {"content": "\n".join(MERGE_LINES), "expected_version": first["version"]}
            base = (await http.put(SOUL, json=body)).json()
            sandbox = self.mem.sandboxes.for_user(user)
            await sandbox.write_text("SOUL.md", shuffled(1))  # an agent's edit, not read back
            body = {"content": shuffled(2), "expected_version": base["version"]}
            return await self.timed(lambda: http.put(SOUL, json=body))

    async def idle(self) -> tuple[float, float, float]:
        return await self.timed(lambda: asyncio.sleep(0.5))


CASES = {
    "nothing (0.5 s idle)": Bench.idle,
    "MCP prompts/get, 256 KB SOUL.md": Bench.prompt,
    "MCP memory_write, 256 KB": Bench.memory_write,
    "MCP record_memory, 256 KB MEMORY.md": Bench.record_memory,
    "MCP update_long_term_memory whole_file, 256 KB": Bench.whole_file,
    "REST PUT merging an agent edit, 12,000 lines": Bench.merging_put,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstrata-loop-stall-") as tmp:
        data = Path(tmp)
        postgres = EmbeddedPostgres(data, database="loop_stall")
        url = postgres.start()
        settings = Settings(
            database_url=url,
            data_dir=data / "data",
            sandbox_root=data / "sandboxes",
            jwt_secret="loop-stall-benchmark-secret-0123456789",
        )
        mem = Memstrata.open(settings, embedder=None)
        try:
            with serve_on_own_loop(create_app(memstrata=mem)) as server:
                bench = Bench(mem, server)
                print("request | A's request ms | worst loop lag ms | slowest /healthz ms")
                for name, case in CASES.items():
                    runs = [asyncio.run(case(bench)) for _ in range(args.runs)]
                    took, lag, health = (sorted(column) for column in zip(*runs, strict=True))
                    print(
                        f"{name} | {statistics.median(took) * 1000:.0f} | "
                        f"{statistics.median(lag) * 1000:.0f} (max {lag[-1] * 1000:.0f}) | "
                        f"{statistics.median(health) * 1000:.0f} (max {health[-1] * 1000:.0f})",
                        flush=True,
                    )
        finally:
            mem.close()
            postgres.stop()


if __name__ == "__main__":
    main()
