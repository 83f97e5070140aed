"""Template scaffolding is not indexed; what the user or agent wrote is."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.scaffold import drop_scaffold, drop_template_paragraphs, scaffold_keys
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.template_history import TemplateScaffold
from memstrata.runtime import Memstrata

TEMPLATE = "---\nfile: USER.md\n---\n# About\n\nFacts go here.\n\n## Profile\n- Name:\n"


def test_untouched_template_leaves_nothing() -> None:
    assert drop_template_paragraphs(TEMPLATE, TEMPLATE) == ""
    assert drop_template_paragraphs("# About\n\nFacts go here.  \n", TEMPLATE) == ""


def test_own_paragraphs_and_filled_in_ones_stay() -> None:
    content = "# About\n\nFacts go here.\n\n## Profile\n- Name: Alice\n\nLoves oolong tea.\n"
    assert drop_template_paragraphs(content, TEMPLATE) == (
        "## Profile\n- Name: Alice\n\nLoves oolong tea."
    )


def test_a_users_own_block_between_rules_at_the_top_is_indexed() -> None:
    """Frontmatter is stripped from the templates, not from what the user wrote: a note
    between two ``---`` lines at the top of MEMORY.md was never searchable."""
    content = "---\nPassport is in the blue drawer\n---\nOther note about zebras\n"
    assert drop_template_paragraphs(content, TEMPLATE) == content.rstrip("\n")
    keys = scaffold_keys("# Memory\n\nWrite here.\n")
    assert drop_scaffold("---\nplace: Lyon\n---\n\n# Memory\n", keys) == "---\nplace: Lyon\n---"


def test_a_leading_byte_order_mark_does_not_hide_the_template() -> None:
    """A sandbox editor that saved USER.md with a BOM made its first template paragraph
    differ from the template's, so it was indexed."""
    assert drop_template_paragraphs("\ufeff# About\n\nFacts go here.\n", TEMPLATE) == ""
    assert drop_template_paragraphs("\ufeff\r\n# About\r\n\r\nFacts go here.\r\n", TEMPLATE) == ""
    assert drop_template_paragraphs("\ufeff\n\n# About\n\nMine.\n", TEMPLATE) == "Mine."
    assert drop_template_paragraphs(f"\ufeff{TEMPLATE}", TEMPLATE) == ""  # with frontmatter
    assert drop_template_paragraphs("\ufeffMy own note", TEMPLATE) == "\ufeffMy own note"


def test_no_interpretation_of_content() -> None:
    # A paragraph that merely resembles the template (different words) is the user's.
    assert drop_template_paragraphs("Facts go there.", TEMPLATE) == "Facts go there."
    assert drop_template_paragraphs("anything", "") == "anything"


def _paths(db: Database) -> list[str]:
    with db.engine.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                text("SELECT chunk_text FROM memory_embeddings WHERE user_id = 'alice'")
            )
        ]


def test_indexer_skips_the_real_templates(db: Database, templates: TemplateSet) -> None:
    indexer = Indexer(db.sessions, None, scaffold=TemplateScaffold(db.sessions, templates).keys)
    for kind in (FileKind.USER, FileKind.MEMORY):
        report = indexer.index_memory_file("alice", kind, templates.load(kind))
        assert report.chunks == 0
    assert _paths(db) == []

    user_md = templates.load(FileKind.USER) + "\n\nAllergic to peanuts.\n"
    indexer.index_memory_file("alice", FileKind.USER, user_md)
    assert _paths(db) == ["Allergic to peanuts."]


def test_the_real_templates_saved_with_a_byte_order_mark_are_not_indexed(
    db: Database, templates: TemplateSet
) -> None:
    indexer = Indexer(db.sessions, None, scaffold=TemplateScaffold(db.sessions, templates).keys)
    for kind in (FileKind.USER, FileKind.MEMORY):
        report = indexer.index_memory_file("alice", kind, "\ufeff" + templates.load(kind))
        assert report.chunks == 0
    assert _paths(db) == []


def test_boilerplate_no_longer_outranks_a_matching_turn(
    db: Database, templates: TemplateSet
) -> None:
    indexer = Indexer(db.sessions, None, scaffold=TemplateScaffold(db.sessions, templates).keys)
    indexer.index_memory_file("alice", FileKind.MEMORY, templates.load(FileKind.MEMORY))
    indexer.index_memory_file("alice", FileKind.USER, templates.load(FileKind.USER))
    then = datetime(2026, 1, 1, tzinfo=UTC)
    indexer.index_turn("alice", "s1", 0, "My current projects: a kite-building club", "", then)
    search = SearchService(IndexCache(db.sessions), decay=DecayPolicy())
    hits = search.search("alice", "current projects", as_of=datetime(2026, 6, 1, tzinfo=UTC)).hits
    assert [h.file_path for h in hits] == ["sessions/s1/0"]


def test_the_store_write_path_skips_the_templates_too(db: Database, templates: TemplateSet) -> None:
    # Provisioning and every PUT stage the rows through ``stage_memory_file``; it indexed
    # the whole template while only ``index_memory_file`` (no production caller) skipped it.
    indexer = Indexer(db.sessions, None, scaffold=TemplateScaffold(db.sessions, templates).keys)
    store = MemoryStore(db.sessions, templates, indexer=indexer)
    store.provision_default_files("alice")
    assert _paths(db) == []

    stored = store.get_memory_file("alice", FileKind.USER)
    assert stored is not None
    store.upsert_memory_file(
        "alice", FileKind.USER, stored.content + "\nAllergic to peanuts.\n", stored.version
    )
    assert _paths(db) == ["Allergic to peanuts."]


def test_an_earlier_templates_paragraphs_stay_out_after_the_template_changes(
    db: Database, settings: Settings, tmp_path: Path, open_runtime: Callable[..., Memstrata]
) -> None:
    """A user provisioned before the platform edited its USER.md template keeps the old
    template's paragraphs; at their next write those are still scaffolding, not memory
    (compared with the current template alone, they were indexed as resident content)."""
    before = open_runtime()
    before.store.provision_default_files("alice")
    old_user_md = before.store.get_memory_file("alice", "user")
    before.pool.close()
    assert old_user_md is not None
    edited = tmp_path / "templates"
    shutil.copytree(default_template_dir(), edited)
    (edited / "USER.md").write_text("# About you\n\nWrite what matters to you here.\n")
    after = Memstrata.open(
        settings.model_copy(update={"template_dir": edited}), database=db, embedder=None
    )
    try:
        after.store.upsert_memory_file(
            "alice", "user", old_user_md.content + "\n\nAllergic to peanuts.\n"
        )
        after.store.provision_default_files("bob")  # the new template: nothing indexed
    finally:
        after.pool.close()
    assert _paths(db) == ["Allergic to peanuts."]
    with db.engine.connect() as conn:
        bob = conn.execute(
            text("SELECT count(*) FROM memory_embeddings WHERE user_id = 'bob'")
        ).scalar_one()
    assert bob == 0


def test_a_template_another_replica_records_is_known_after_the_reread(
    db: Database, tmp_path: Path
) -> None:
    """A rolling deploy of new templates: the replica still running the old ones learns
    the new template's paragraphs (recorded by a newer replica) at its next write after
    the reread interval, instead of indexing them as content until it restarts."""
    old = TemplateScaffold(db.sessions, TemplateSet(default_template_dir()), reread_s=0.2)
    old.record([FileKind.USER])
    edited = tmp_path / "templates"
    shutil.copytree(default_template_dir(), edited)
    (edited / "USER.md").write_text("# About you\n\nWrite what matters to you here.\n")
    TemplateScaffold(db.sessions, TemplateSet(edited)).record([FileKind.USER])
    new_paragraph = "Write what matters to you here."
    assert new_paragraph not in old.keys(FileKind.USER)  # read within the interval
    time.sleep(0.25)
    assert new_paragraph in old.keys(FileKind.USER)


def test_an_unreadable_template_of_another_file_does_not_fail_the_reread(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The reread records every indexed kind's template; MEMORY.md's gone missing made a
    USER.md write's template step raise (and index the boilerplate) once per interval."""
    edited = tmp_path / "templates"
    shutil.copytree(default_template_dir(), edited)
    scaffold = TemplateScaffold(db.sessions, TemplateSet(edited), reread_s=0.0)
    scaffold.record([FileKind.USER, FileKind.MEMORY])
    (edited / "MEMORY.md").unlink()
    with caplog.at_level("WARNING"):
        keys = scaffold.keys(FileKind.USER)
    assert scaffold_keys(TemplateSet(edited).load(FileKind.USER)) <= keys
    [logged] = [r for r in caplog.records if r.getMessage() == "index.template_unreadable"]
    assert event_fields(logged)["file_type"] == FileKind.MEMORY.file_type
