"""The whole-file rewrite guard tells scaffolding by the indexer's rule, older templates
included: a user provisioned before the platform edited its MEMORY.md template keeps that
template's intro paragraphs, which the indexer does not index (``retrieval.template_history``)
and which a rewrite may therefore drop unnamed too. Compared with the current template
alone, such a user's first ``update_long_term_memory(whole_file=True)`` or MCP
``memory_write`` was refused for them until ``replace_all``. Two runtimes on one real
database, as two deploys: the old one provisions, the current one judges the rewrite."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import Client

from memstrata.agent.removals import template_paragraphs
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.mcp import build_server
from memstrata.memory.kinds import FileKind
from memstrata.memory.templates import default_template_dir
from memstrata.runtime import Memstrata

pytestmark = pytest.mark.anyio

USER = "alice"
OLD_INTRO = "Long-term notes kept for this user by the platform's agent."
OWN = "We agreed to migrate the billing service to Postgres 18 in Q1."
ENTRIES_ONLY = "# MEMORY.md\n\n## Decisions\n- 2026-02-01: Chose Dana as owner.\n"


@pytest.fixture
def current(db: Database, settings: Settings, tmp_path: Path) -> Memstrata:
    """The current deploy, after a deploy with an older MEMORY.md template provisioned
    ``USER`` and recorded that template's paragraphs."""
    older = tmp_path / "older-templates"
    shutil.copytree(default_template_dir(), older)
    (older / "MEMORY.md").write_text(
        f"# MEMORY.md\n\n{OLD_INTRO}\n\n## Decisions\n- 2026-02-01: Chose Dana as owner.\n"
    )
    before = Memstrata.open(
        settings.model_copy(update={"template_dir": older}), database=db, embedder=None
    )
    try:
        before.store.provision_default_files(USER)
    finally:
        before.close()
    return Memstrata.open(settings, database=db, embedder=None)


def stored(mem: Memstrata) -> str:
    file = mem.store.get_memory_file(USER, FileKind.MEMORY)
    assert file is not None
    return file.content


async def test_the_agent_tools_may_drop_an_older_templates_paragraph(current: Memstrata) -> None:
    assert OLD_INTRO in stored(current)
    box = current.sandboxes.for_user(USER)
    tools = MemoryTools(ToolContext.bind(USER, current.sync, box))
    try:
        answer = await tools.update_long_term_memory(ENTRIES_ONLY, whole_file=True)
        assert not answer.failed, answer
        assert stored(current) == ENTRIES_ONLY
    finally:
        current.close()


async def test_memory_write_may_drop_an_older_templates_paragraph(current: Memstrata) -> None:
    server = build_server(lambda: current, lambda _ctx: USER)
    try:
        async with Client(server) as client:
            read = await client.call_tool("memory_read", {"name": "memory"})
            assert read.structured_content is not None
            version = read.structured_content["version"]
            written = await client.call_tool(
                "memory_write",
                {"name": "memory", "content": ENTRIES_ONLY, "expected_version": version},
            )
        assert not written.is_error, written.content
        assert stored(current) == ENTRIES_ONLY
    finally:
        current.close()


async def test_a_persons_paragraph_beside_it_is_still_refused(current: Memstrata) -> None:
    mine = stored(current).replace("## Decisions", f"{OWN}\n\n## Decisions")
    current.store.upsert_memory_file(USER, FileKind.MEMORY, mine)
    tools = MemoryTools(ToolContext.bind(USER, current.sync, current.sandboxes.for_user(USER)))
    try:
        answer = await tools.update_long_term_memory(ENTRIES_ONLY, whole_file=True)
        assert answer.failed
        assert f"would remove 1 paragraph ({OWN!r}" in answer
        assert OLD_INTRO not in answer
        assert stored(current) == mine
    finally:
        current.close()


def test_the_guard_and_the_indexer_share_one_rule(current: Memstrata) -> None:
    try:
        keys = template_paragraphs(current.store, FileKind.MEMORY)
        assert keys == current.indexer.template_paragraphs(FileKind.MEMORY)
        assert OLD_INTRO in keys
        assert template_paragraphs(current.store, FileKind.SOUL) == frozenset()
    finally:
        current.close()
