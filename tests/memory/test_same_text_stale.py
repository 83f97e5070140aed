"""A write of the text a file holds, based on an older version: the spec's conflict by
default (``same_content`` says the file holds that text), the stored file, nothing written,
with ``same_text_stale_version="unchanged"``; on the current version always the stored
file. ``MemoryStore`` on the real database; the setting from ``Settings`` and the
environment (``MEMSTRATA_SAME_TEXT_STALE_VERSION``)."""

from __future__ import annotations

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import InvalidSettingError, VersionConflictError
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet

USER = "same-text"
TEXT = "# MEMORY.md\n- Likes green tea\n"


def _store(db: Database, templates: TemplateSet, rule: str) -> MemoryStore:
    return MemoryStore(db.sessions, templates, same_text_stale_version=rule)  # type: ignore[arg-type]


def test_by_default_a_stale_write_of_the_stored_text_is_a_conflict_saying_so(
    store: MemoryStore,
) -> None:
    assert store.same_text_stale_version == "conflict"
    assert store.upsert_memory_file(USER, "memory", TEXT, 0).version == 1
    assert store.upsert_memory_file(USER, "memory", TEXT, 1).changed is False  # current: no bump
    with pytest.raises(VersionConflictError) as info:
        store.upsert_memory_file(USER, "memory", TEXT, 0)  # the first write, retried
    conflict = info.value
    assert isinstance(conflict, RuntimeError)  # the spec's type
    assert (conflict.expected_version, conflict.current_version) == (0, 1)
    assert conflict.same_content is True
    assert str(conflict) == (
        "version conflict on MEMORY.md: expected version 0, found version 1, which holds this "
        "text already (nothing to write: a write of it landed, perhaps one whose answer was "
        "lost); to change it further, read it again and apply your change to version 1"
    )
    stored = store.get_memory_file(USER, "memory")
    assert stored is not None and (stored.content, stored.version) == (TEXT, 1)


def test_a_stale_write_of_other_text_is_a_conflict_without_same_content(
    store: MemoryStore,
) -> None:
    store.upsert_memory_file(USER, "memory", TEXT, 0)
    with pytest.raises(VersionConflictError) as info:
        store.upsert_memory_file(USER, "memory", "other", 0)
    assert info.value.same_content is False
    assert "holds this text" not in str(info.value)


def test_with_the_unchanged_rule_a_stale_write_of_the_stored_text_is_the_stored_file(
    db: Database, templates: TemplateSet
) -> None:
    store = _store(db, templates, "unchanged")
    store.upsert_memory_file(USER, "memory", TEXT, 0)
    again = store.upsert_memory_file(USER, "memory", TEXT, 0)
    assert (again.version, again.changed) == (1, False)
    with pytest.raises(VersionConflictError):  # other text is still stale
        store.upsert_memory_file(USER, "memory", "other", 0)


def test_skip_unchanged_false_makes_a_stale_same_text_write_a_conflict_by_any_rule(
    db: Database, templates: TemplateSet
) -> None:
    store = _store(db, templates, "unchanged")
    store.upsert_memory_file(USER, "memory", TEXT, 0)
    with pytest.raises(VersionConflictError) as info:
        store.upsert_memory_file(USER, "memory", TEXT, 0, skip_unchanged=False)
    assert info.value.same_content is True


def test_edit_memory_file_of_no_change_bumps_nothing(store: MemoryStore) -> None:
    """``edit_memory_file`` writes on the version it read: an edit that changes nothing is
    no conflict and no version."""
    store.upsert_memory_file(USER, "memory", TEXT)
    same = store.edit_memory_file(USER, "memory", lambda text: text)
    assert (same.version, same.changed) == (1, False)


def test_the_rule_comes_from_settings_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().same_text_stale_version == "conflict"
    monkeypatch.setenv("MEMSTRATA_SAME_TEXT_STALE_VERSION", "unchanged")
    assert Settings().same_text_stale_version == "unchanged"
    monkeypatch.setenv("MEMSTRATA_SAME_TEXT_STALE_VERSION", "200")
    with pytest.raises(InvalidSettingError, match="MEMSTRATA_SAME_TEXT_STALE_VERSION"):
        Settings()


def test_a_store_refuses_an_unknown_rule(db: Database, templates: TemplateSet) -> None:
    with pytest.raises(ValueError, match="must be 'conflict' or 'unchanged'; got 'yes'"):
        _store(db, templates, "yes")
