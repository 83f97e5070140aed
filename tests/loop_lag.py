"""How late an event loop runs while a request is served.

:class:`LagProbe` sleeps 5 ms at a time on a loop and keeps the worst lateness of its
wake-ups. Synchronous work on that loop (a Markdown parse, a merge) delays the wake-up by
as long as it runs, and so every other request the loop serves; work on a worker thread
delays it by about one GIL switch interval (5 ms). :func:`serve_on_own_loop` runs an app
with uvicorn on a thread and loop of its own, as ``memstrata serve`` runs it, so the probe
sees the server's loop and not the client's; :func:`probing` probes the caller's own loop
(a library call awaited in the test).

The cyclic collector is off while a probe runs: a full collection stops every thread of
the process for as long as it walks the heap (~0.1 s for what a test session holds), which
is not the stall being measured. :func:`costly_markdown` is an input at the limits. Shared
with ``benchmarks/loop_stall.py``.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from memstrata.memory.kinds import MAX_CONTENT_BYTES

PROBE_SLEEP_S = 0.005


def costly_markdown(extra: str = "", *, room: int = 200) -> str:
    """A valid memory file ``room`` bytes under the size limit that the Markdown reader
    finds costly: one-character ``<`` lines (each one the start of an HTML block to test),
    then a closed fence. One reading of it: ~0.4 s on the 2-core reference machine."""
    tail = "```\nx\n```\n" + extra
    return "<\n" * ((MAX_CONTENT_BYTES - room - len(tail)) // 2) + tail


class LagProbe:
    """The worst lateness (``worst_s``) of a 5 ms sleep on the loop that runs :meth:`run`."""

    def __init__(self) -> None:
        self.worst_s = 0.0
        self.started = threading.Event()
        self._stopped = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.started.set()
        while not self._stopped:
            start = loop.time()
            await asyncio.sleep(PROBE_SLEEP_S)
            self.worst_s = max(self.worst_s, loop.time() - start - PROBE_SLEEP_S)

    def stop(self) -> None:
        self._stopped = True


@contextmanager
def _collector_off() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@dataclass(frozen=True)
class LoopServer:
    url: str
    loop: asyncio.AbstractEventLoop

    @contextmanager
    def lag(self) -> Iterator[LagProbe]:
        """A probe on the server's loop for the duration of the ``with`` block."""
        probe = LagProbe()
        with _collector_off():
            running = asyncio.run_coroutine_threadsafe(probe.run(), self.loop)
            assert probe.started.wait(10), "the server's loop did not start the probe"
            try:
                yield probe
            finally:
                probe.stop()
                running.result(timeout=30)


@contextmanager
def serve_on_own_loop(app: ASGIApp) -> Iterator[LoopServer]:
    """``app`` (its lifespan included) on a free loopback port, on a thread and event loop
    of its own; yields its base URL and loop."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(
        target=loop.run_until_complete, args=(server.serve(sockets=[sock]),), daemon=True
    )
    thread.start()
    try:
        for _ in range(600):
            if server.started or not thread.is_alive():
                break
            thread.join(0.05)
        assert server.started, "uvicorn did not start"
        yield LoopServer(f"http://127.0.0.1:{port}", loop)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        if not thread.is_alive():
            loop.close()


@asynccontextmanager
async def probing() -> AsyncIterator[LagProbe]:
    """A probe on the caller's own loop for the duration of the ``async with`` block."""
    probe = LagProbe()
    with _collector_off():
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(0)  # started before the work it measures
        try:
            yield probe
        finally:
            probe.stop()
            await task
