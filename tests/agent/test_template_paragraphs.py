"""A whole-file rewrite may drop the paragraphs a file still shares with its template: they
are scaffolding, not prose a person wrote — the indexer's rule (``retrieval.scaffold``),
for the files whose scaffolding it drops (USER.md, MEMORY.md). An agent that rewrote a
provisioned MEMORY.md from scratch was refused the first time for the template's two intro
paragraphs alone. A person's paragraph, or a template paragraph a person edited, is still
refused; so is SOUL.md's template, which is the persona. ``update_long_term_memory`` with
``whole_file`` against a real DB and sandbox, then the guard's verdict for each file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memstrata.agent.removals import template_paragraphs
from memstrata.agent.rewrite_guard import WOULD_REMOVE_TEXT, Refused, Store, rewrite_verdict
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import given

pytestmark = pytest.mark.anyio

# The template's first paragraph, as MEMORY.md is provisioned with it.
CURATED = "Curated notes worth keeping across sessions"
OWN = "We agreed to migrate the billing service to Postgres 18 in Q1."
ENTRIES_ONLY = "# MEMORY.md\n\n## Decisions\n- 2026-02-01: Chose Dana as owner.\n"


async def test_a_rewrite_dropping_only_the_templates_paragraphs_is_stored_unflagged(
    tools: MemoryTools, store: MemoryStore, templates: TemplateSet
) -> None:
    await tools.record_memory("Chose Dana as owner.", section="Decisions")
    _, version = memory(store)
    assert CURATED in memory(store)[0]  # provisioned from the template

    answer = await tools.update_long_term_memory(ENTRIES_ONLY, whole_file=True)

    # The answer names the sections that went, and no paragraph: none was the person's.
    assert answer == (
        f"Replaced the whole of MEMORY.md (version {version + 1}). Removed 2 sections "
        "(Ongoing, Lessons)."
    )
    assert memory(store) == (ENTRIES_ONLY, version + 1)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        # A person's own paragraph under the template's.
        (lambda t: t.replace("## Decisions", f"{OWN}\n\n## Decisions"), repr(OWN)),
        # A template paragraph a person edited is theirs now.
        (lambda t: t.replace("newest last", "newest first"), "'Write entries as short dated"),
    ],
    ids=["own paragraph", "edited template paragraph"],
)
async def test_dropping_a_persons_paragraph_is_still_refused(
    tools: MemoryTools,
    sync: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    change: Callable[[str], str],
    named: str,
) -> None:
    content = change(templates.load(FileKind.MEMORY))
    version = await given(sync, FileKind.MEMORY, content)

    answer = await tools.update_long_term_memory(ENTRIES_ONLY, whole_file=True)

    assert answer.failed
    assert answer.startswith(
        "error: whole_file replaces all of MEMORY.md, and this content would remove 1 "
        f"paragraph ({named}"
    )
    assert CURATED not in answer  # the untouched template paragraph is not named
    assert memory(store) == (content, version)


def stored(kind: FileKind, content: str) -> MemoryFile:
    return MemoryFile("alice", kind, content, 3, None)


@pytest.mark.parametrize("kind", [FileKind.USER, FileKind.MEMORY])
def test_memory_write_may_drop_the_templates_paragraphs_of_user_and_memory(
    store: MemoryStore, templates: TemplateSet, kind: FileKind
) -> None:
    old = templates.load(kind)
    new = "\n".join(line for line in old.split("\n") if line.startswith(("#", "- ")))
    keys = template_paragraphs(store, kind)

    verdict = rewrite_verdict(kind, new, stored(kind, old), 3, scaffold=keys)
    unknown = rewrite_verdict(kind, new, stored(kind, old), 3)  # no template: all are prose

    assert (
        isinstance(verdict, Store) and verdict.answer(4) == f"Saved {kind.filename} as version 4."
    )
    assert isinstance(unknown, Refused) and unknown.data["error"] == WOULD_REMOVE_TEXT


def test_soul_mds_template_is_the_persona_and_stays_guarded(
    store: MemoryStore, templates: TemplateSet
) -> None:
    old = templates.load(FileKind.SOUL)
    # Its paragraph under the title dropped, as the others' templates' may be.
    new = "\n\n".join(p for p in old.split("\n\n") if not p.startswith("You are"))

    keys = template_paragraphs(store, FileKind.SOUL)
    verdict = rewrite_verdict(FileKind.SOUL, new, stored(FileKind.SOUL, old), 3, scaffold=keys)

    assert keys == frozenset()
    assert isinstance(verdict, Refused) and verdict.data["error"] == WOULD_REMOVE_TEXT
    assert verdict.message.startswith(
        "this would remove 1 paragraph of SOUL.md (\"You are this user's long-term assistant"
    )


def test_a_missing_template_leaves_every_paragraph_guarded(
    store: MemoryStore, tmp_path: Path
) -> None:
    assert (
        template_paragraphs(MemoryStore(store.sessions, TemplateSet(tmp_path)), FileKind.MEMORY)
        == frozenset()
    )
