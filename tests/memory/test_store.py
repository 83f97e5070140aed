"""Memory-file store on a real PostgreSQL: versions, optimistic locking, limits, provisioning."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import (
    ContentTooLargeError,
    InvalidContentError,
    InvalidFileTypeError,
    InvalidUserIdError,
    VersionConflictError,
)
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet


def test_insert_then_update_bumps_version_by_one(store: MemoryStore) -> None:
    first = store.upsert_memory_file("alice", "user", "v1")
    assert (first.version, first.file_type, first.content) == (1, "user_md", "v1")
    second = store.upsert_memory_file("alice", "user", "v2")
    assert second.version == 2
    got = store.get_memory_file("alice", "user")
    assert got is not None and (got.content, got.version) == ("v2", 2)


def test_kinds_map_to_file_types(store: MemoryStore) -> None:
    for name, file_type in (("user", "user_md"), ("soul", "soul_md"), ("memory", "memory_md")):
        assert store.upsert_memory_file("bob", name, name).file_type == file_type


# The names HTTP refuses (docs/API.md, "Memory files"); AGENTS.md's, below.
REFUSED = ["tools", "", "user ", "User", "user_md", "bogus"]


@pytest.mark.parametrize("bad", REFUSED)
def test_invalid_kind_is_the_same_error_for_reads_and_writes(store: MemoryStore, bad: str) -> None:
    with pytest.raises(InvalidFileTypeError, match="invalid file name: "):
        store.upsert_memory_file("u", bad, "x")
    with pytest.raises(InvalidFileTypeError, match="invalid file name: "):
        store.get_memory_file("u", bad)
    assert store.get_memory_file("u", "user") is None


@pytest.mark.parametrize(
    ("name", "kind"),
    [("user", FileKind.USER), ("USER.md", FileKind.USER), (FileKind.SOUL, FileKind.SOUL)],
)
def test_the_api_name_the_file_name_and_the_kind_are_taken(
    store: MemoryStore, name: str | FileKind, kind: FileKind
) -> None:
    assert store.upsert_memory_file("u", name, "x").kind is kind
    got = store.get_memory_file("u", name)
    assert got is not None and got.kind is kind


def test_legacy_agents_rows_are_readable_but_never_written(
    store: MemoryStore, db: Database
) -> None:
    """AGENTS.md is the platform's template; an ``agents_md`` row an older database still
    holds stays readable (the spec keeps such rows for compatibility) and is never written."""
    assert store.get_memory_file("old", "agents") is None  # no legacy row: nothing to read
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO user_memory (user_id, file_type, content) "
                "VALUES ('old', 'agents_md', 'legacy')"
            )
        )
    for name in ("agents", FileKind.AGENTS):  # the names docs/LIBRARY.md reads it by
        legacy = store.get_memory_file("old", name)
        assert legacy is not None and legacy.content == "legacy"
        assert legacy.kind is FileKind.AGENTS
    for name in ("agents", "AGENTS.md", FileKind.AGENTS):
        with pytest.raises(InvalidFileTypeError, match="platform template"):
            store.upsert_memory_file("old", name, "new")
    again = store.get_memory_file("old", "agents")
    assert again is not None and again.content == "legacy"


def test_get_unknown_kind_raises(store: MemoryStore) -> None:
    with pytest.raises(ValueError):
        store.get_memory_file("u", "tools")


def test_expected_version_match_and_mismatch(store: MemoryStore) -> None:
    store.upsert_memory_file("c", "memory", "a")
    ok = store.upsert_memory_file("c", "memory", "b", expected_version=1)
    assert ok.version == 2
    with pytest.raises(VersionConflictError) as info:
        store.upsert_memory_file("c", "memory", "stale", expected_version=1)
    assert isinstance(info.value, RuntimeError)
    assert (info.value.expected, info.value.actual) == (1, 2)
    current = store.get_memory_file("c", "memory")
    assert current is not None and (current.content, current.version) == ("b", 2)


def test_expected_version_on_missing_row(store: MemoryStore) -> None:
    with pytest.raises(VersionConflictError) as info:
        store.upsert_memory_file("new", "user", "x", expected_version=3)
    assert info.value.actual is None
    created = store.upsert_memory_file("new", "user", "x", expected_version=0)
    assert created.version == 1
    with pytest.raises(VersionConflictError):
        store.upsert_memory_file("new", "user", "y", expected_version=0)


def test_concurrent_writers_exactly_one_wins(store: MemoryStore) -> None:
    store.upsert_memory_file("race", "user", "start")
    writers = 24
    barrier = threading.Barrier(writers)

    def write(i: int) -> str:
        barrier.wait()
        try:
            store.upsert_memory_file("race", "user", f"writer {i}", expected_version=1)
            return f"won {i}"
        except VersionConflictError:
            return "conflict"

    with ThreadPoolExecutor(max_workers=writers) as pool:
        results = list(pool.map(write, range(writers)))
    winners = [r for r in results if r.startswith("won")]
    assert len(winners) == 1
    assert results.count("conflict") == writers - 1
    final = store.get_memory_file("race", "user")
    assert final is not None and final.version == 2
    assert final.content == "writer " + winners[0].split()[1]


def test_concurrent_unconditional_writers_lose_no_increment(store: MemoryStore) -> None:
    writers = 20
    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = sorted(
            pool.map(
                lambda i: store.upsert_memory_file("inc", "memory", str(i)).version, range(writers)
            )
        )
    assert versions == list(range(1, writers + 1))


def test_content_limits(db: Database, templates: TemplateSet) -> None:
    small = MemoryStore(db.sessions, templates, max_content_bytes=10)
    assert small.upsert_memory_file("lim", "user", "0123456789").version == 1
    with pytest.raises(ContentTooLargeError, match="over the limit of 10 bytes"):
        small.upsert_memory_file("lim", "user", "01234567890")
    with pytest.raises(ContentTooLargeError):  # 4 chars, 12 bytes: the limit is in bytes
        small.upsert_memory_file("lim", "user", "记忆记忆")
    with pytest.raises(InvalidContentError, match="NUL"):
        small.upsert_memory_file("lim", "user", "a\x00b")
    with pytest.raises(InvalidContentError):
        small.upsert_memory_file("lim", "user", "\ud800")
    with pytest.raises(InvalidContentError):
        small.upsert_memory_file("lim", "user", 42)  # type: ignore[arg-type]
    kept = small.get_memory_file("lim", "user")
    assert kept is not None and (kept.content, kept.version) == ("0123456789", 1)


def test_default_limit_is_256_kib(store: MemoryStore) -> None:
    assert store.upsert_memory_file("big", "memory", "a" * 256 * 1024).version == 1
    with pytest.raises(ContentTooLargeError):
        store.upsert_memory_file("big", "memory", "a" * (256 * 1024 + 1))


def test_unicode_is_byte_exact(store: MemoryStore) -> None:
    content = "喜欢喝乌龙茶 🍵\r\n  trailing spaces  \n\tتبويب\n\u200b零宽\n"
    store.upsert_memory_file("uni", "user", content)
    got = store.get_memory_file("uni", "user")
    assert got is not None and got.content == content


def test_empty_content_is_allowed(store: MemoryStore) -> None:
    assert store.upsert_memory_file("e", "memory", "").content == ""


@pytest.mark.parametrize("bad", ["", "   ", "x" * 101, "a\x00b", "bob\n", " bob", "b\x7fob"])
def test_bad_user_ids(store: MemoryStore, bad: str) -> None:
    with pytest.raises(InvalidUserIdError):
        store.upsert_memory_file(bad, "user", "x")
    with pytest.raises(InvalidUserIdError):
        store.provision_default_files(bad)


def test_skip_unchanged_keeps_version(store: MemoryStore) -> None:
    store.upsert_memory_file("s", "user", "same")
    same = store.upsert_memory_file("s", "user", "same", skip_unchanged=True)
    assert (same.version, same.changed) == (1, False)
    changed = store.upsert_memory_file("s", "user", "different", skip_unchanged=True)
    assert (changed.version, changed.changed) == (2, True)


def test_users_are_isolated(store: MemoryStore) -> None:
    store.upsert_memory_file("u1", "user", "secret of u1")
    assert store.get_memory_file("u2", "user") is None
    store.upsert_memory_file("u2", "user", "u2")
    got = store.get_memory_file("u1", "user")
    assert got is not None and got.content == "secret of u1" and got.version == 1


def test_provision_from_templates_is_idempotent(
    store: MemoryStore, templates: TemplateSet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="memstrata")
    created = store.provision_default_files("newbie")
    assert created == [FileKind.SOUL, FileKind.USER, FileKind.MEMORY]
    soul = store.get_memory_file("newbie", "soul")
    assert soul is not None and soul.content == templates.load(FileKind.SOUL)
    assert not soul.content.startswith("---")
    assert soul.content.startswith("# SOUL.md")
    assert [r for r in caplog.records if r.getMessage() == "memory.user.initialised"]
    store.upsert_memory_file("newbie", "user", "edited")
    assert store.provision_default_files("newbie") == []
    user = store.get_memory_file("newbie", "user")
    assert user is not None and (user.content, user.version) == ("edited", 2)
    assert store.get_memory_file("newbie", "agents") is None  # AGENTS.md is never stored


def test_provision_concurrently(store: MemoryStore, db: Database) -> None:
    barrier = threading.Barrier(12)

    def provision(_: int) -> int:
        barrier.wait()
        return len(store.provision_default_files("crowd"))

    with ThreadPoolExecutor(max_workers=12) as pool:
        created = list(pool.map(provision, range(12)))
    assert sum(created) == 3
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT file_type, version FROM user_memory WHERE user_id='crowd' ORDER BY 1")
        ).all()
    assert [tuple(r) for r in rows] == [("memory_md", 1), ("soul_md", 1), ("user_md", 1)]
