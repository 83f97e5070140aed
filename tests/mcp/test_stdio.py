"""``memstrata mcp --user U`` as a real subprocess, driven by the SDK's stdio client.

If anything but protocol messages reached stdout (a banner, a log line, a child's output),
the client could not parse the stream and these calls would fail.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.retrieval.local_server import LocalEmbeddingServer

pytestmark = pytest.mark.anyio


def _env(tmp_path: Path, pg_url: str, embedding: LocalEmbeddingServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(tmp_path / "data"),
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_EMBEDDING_MODELS=json.dumps([embedding.model_spec.model_dump()]),
        MEMSTRATA_EMBEDDING_MODEL=embedding.model_spec.name,
        MEMSTRATA_LOG_LEVEL="INFO",  # logs are on: they must all go to stderr
    )
    return env


@pytest.mark.timeout(120)
async def test_stdio_server_answers_for_its_user_only(
    tmp_path: Path, db: object, pg_url: str, embedding_server: LocalEmbeddingServer
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from memstrata.cli import main; main()", "mcp", "--user", "stdio-alice"],
        env=_env(tmp_path, pg_url, embedding_server),
    )
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"memory_search", "memory_write", "record_memory", "skill_set"} <= names
        recorded = await client.call_tool("record_memory", {"content": "Keeps bees in Lyon"})
        assert not recorded.is_error, recorded.content
        found = await client.call_tool("memory_search", {"query": "bees", "top_k": 3})
        assert found.structured_content is not None
        data = found.structured_content
        assert data["mode"] == "hybrid" or "query embedding failed" in data["warnings"][0]
        hit = found.structured_content["hits"][0]
        assert hit["file_path"] == "MEMORY.md" and "Keeps bees in Lyon" in hit["text"]
        read = await client.read_resource("memstrata://files/memory")
        assert "Keeps bees in Lyon" in read.contents[0].text  # type: ignore[union-attr]
    # The files belong to --user and to nobody else.
    sandbox = tmp_path / "data" / "sandboxes"
    assert any("Keeps bees in Lyon" in p.read_text() for p in sandbox.rglob("MEMORY.md"))


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--user", ""], 1, "error: --user: user_id must be a non-empty string"),
        (["--user", "x" * 101], 1, "error: --user: user_id is longer than 100 characters"),
        ([], 2, "Missing option '--user'"),
    ],
)
def test_stdio_bad_user(args: list[str], code: int, message: str) -> None:
    result = CliRunner().invoke(build_app(), ["mcp", *args])
    assert result.exit_code == code
    assert message in result.stderr
    assert result.stdout == ""
