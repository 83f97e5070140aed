"""User ids with characters that show as nothing or reorder the text: one rule with session
ids (``text.ID_REFUSED``), and an id stored before the rule can still be erased.

``"bob\\u200b"`` (a zero-width space) shows as ``bob`` and ``"a\\u202eb"`` (a right-to-left
override) shows reversed; both were taken as new users while a session id refused the
bidi controls. Now every format character (Unicode category Cf) is refused in both, the
refusal naming the character, except a zero-width joiner inside an emoji.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.distribution import PER_USER_TABLES
from memstrata.db.engine import transaction
from memstrata.errors import InvalidContentError, InvalidUserIdError
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.session_ids import check_session_id
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name

# (id, the character's position and name in the refusal)
FORMAT_IDS = [
    ("bob\u200b", "character 4 is U+200B ZERO WIDTH SPACE"),
    ("a\u202eb", "character 2 is U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("\u2066alice", "character 1 is U+2066 LEFT-TO-RIGHT ISOLATE"),
    ("al\u00adice", "character 3 is U+00AD SOFT HYPHEN"),
    ("x\ufeffy", "character 2 is U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("a\u2060b", "character 2 is U+2060 WORD JOINER"),
    ("bob\u200d", "character 4 is U+200D ZERO WIDTH JOINER"),
    ("flag\U000e0067", "character 5 is U+E0067 TAG LATIN SMALL LETTER G"),
    ("a\u200eb", "character 2 is U+200E LEFT-TO-RIGHT MARK"),
]


@pytest.mark.parametrize(("user_id", "named"), FORMAT_IDS)
def test_a_user_id_with_a_format_character_is_refused_naming_it(user_id: str, named: str) -> None:
    with pytest.raises(InvalidUserIdError) as info:
        validate_user_id(user_id)
    message = str(info.value)
    assert message.startswith(
        f"user_id must not contain invisible or bidirectional format characters: {named} ("
    ), message
    assert message.endswith("; remove it")
    assert message.isascii()  # safe in a header and a log line


def test_the_refusal_says_why_for_a_bidi_control() -> None:
    with pytest.raises(InvalidUserIdError) as info:
        validate_user_id("a\u202eb")
    assert str(info.value) == (
        "user_id must not contain invisible or bidirectional format characters: character 2 "
        "is U+202E RIGHT-TO-LEFT OVERRIDE (a bidirectional control, which shows the id and "
        "the text after it reordered); remove it"
    )


@pytest.mark.parametrize("user_id", FORMAT_IDS, ids=[named for _, named in FORMAT_IDS])
def test_a_session_id_refuses_the_same_characters_in_the_same_words(
    user_id: tuple[str, str],
) -> None:
    """One rule: what a user id refuses, a session id refuses, naming it alike."""
    session_id, named = user_id
    with pytest.raises(InvalidUserIdError) as as_user:
        validate_user_id(session_id)
    with pytest.raises(InvalidContentError) as as_session:
        check_session_id(session_id)
    why = str(as_user.value).split(": ", 1)[1].removesuffix("; remove it")
    assert f": {why};" in str(as_session.value)
    assert named in why


@pytest.mark.parametrize(
    "user_id",
    [
        "alice",
        "José",
        "会话一",
        "שיחה-1",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",  # family: joiners inside an emoji
        "\U0001f469\U0001f3fd\u200d\U0001f4bb",  # technologist with a skin tone
        "\U0001f3f3\ufe0f\u200d\U0001f308",  # rainbow flag
    ],
)
def test_printable_ids_and_emoji_sequences_stay_allowed(user_id: str) -> None:
    assert validate_user_id(user_id) == user_id
    assert check_session_id(user_id) == user_id


def test_a_new_user_with_such_an_id_is_never_stored(db: Database, mem: Memstrata) -> None:
    for user_id, _ in FORMAT_IDS:
        with pytest.raises(InvalidUserIdError):
            mem.store.provision_default_files(user_id)
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM user_memory")).scalar_one() == 0


def test_an_id_stored_before_the_rule_can_still_be_erased(
    db: Database, mem: Memstrata, settings_root: Path
) -> None:
    """Rows written for a valid id, then given the old id in SQL, as a database from
    before the rule holds them: the erasure finds them and removes them, sandbox too."""
    old = "a\u202eb"
    mem.store.provision_default_files("stand-in")
    mem.indexer.index_turn("stand-in", "s", 0, "the blue door is in Lisbon")
    with transaction(db.sessions) as session:
        for table in PER_USER_TABLES:
            session.execute(
                text(f"UPDATE {table} SET user_id = :old WHERE user_id = 'stand-in'"),
                {"old": old},
            )
    box = settings_root / safe_dir_name(old)
    box.mkdir(parents=True)
    (box / "USER.md").write_text("from before")
    with pytest.raises(InvalidUserIdError):
        mem.search.search(old, "blue door")  # every other path refuses it

    erasure = mem.erase_user(old)

    assert erasure.found and erasure.sandbox == "removed"
    assert erasure.deleted["user_memory"] == 3 and erasure.deleted["memory_embeddings"] == 1
    assert not box.exists()
    with db.engine.connect() as conn:
        left = conn.execute(
            text("SELECT count(*) FROM user_memory WHERE user_id = :u"), {"u": old}
        ).scalar_one()
    assert left == 0


def test_an_id_nothing_is_stored_under_stays_refused_by_the_erasure(mem: Memstrata) -> None:
    with pytest.raises(InvalidUserIdError, match="nothing is stored under that id"):
        mem.erase_user("nobody\u200b")


@pytest.fixture
def settings_root(mem: Memstrata) -> Path:
    return mem.settings.resolved_sandbox_root
