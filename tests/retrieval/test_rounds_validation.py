"""The shared validation of conversation rounds (``retrieval.rounds``), through the library:
timestamps, session ids, text that UTF-8 cannot encode, and re-indexing a turn sent
without a timestamp."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import InvalidContentError, InvalidUserIdError
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import Round, RoundsInvalidError, check_not_future
from memstrata.retrieval.session_ids import (
    SESSION_ID_HINT,
    InvalidSessionIdError,
    check_session_id,
)

PLUS_ONE = timezone(timedelta(hours=1))
MINUS_ONE = timezone(timedelta(hours=-1))
WHEN = datetime(2026, 11, 1, tzinfo=UTC)


def rows(db: Database, user: str = "u") -> list[tuple[str, int, datetime, str]]:
    with db.engine.connect() as conn:
        return [
            (r[0], r[1], r[2], r[3])
            for r in conn.execute(
                text(
                    "SELECT file_path, id, created_at, chunk_text FROM memory_embeddings "
                    "WHERE user_id = :u ORDER BY file_path, chunk_index"
                ),
                {"u": user},
            )
        ]


def age(db: Database, days: int, user: str = "u") -> None:
    """Move every row of ``user`` ``days`` into the past (as if indexed back then)."""
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE memory_embeddings SET created_at = created_at - make_interval(days => :d) "
                "WHERE user_id = :u"
            ),
            {"d": days, "u": user},
        )


# -- timestamps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "when",
    [
        datetime(1, 1, 1, tzinfo=PLUS_ONE),  # 1 BC in UTC: stored, but never read back
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1),  # naive: UTC
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 30, tzinfo=PLUS_ONE),  # 1969-12-31T23:30Z
    ],
)
def test_timestamps_before_the_epoch_are_refused(db: Database, when: datetime) -> None:
    indexer = Indexer(db.sessions, None)
    with pytest.raises(RoundsInvalidError, match=r"on or after 1970-01-01T00:00:00Z") as info:
        indexer.index_turn("u", "s", 0, "hello", timestamp=when)
    assert isinstance(info.value, ValueError)
    with pytest.raises(RoundsInvalidError, match="on or after 1970-01-01T00:00:00Z"):
        indexer.index_rounds("u", [Round("s", 0, "hello", "", when)], embed=False)
    assert rows(db) == []


def test_the_epoch_itself_is_accepted(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    report = indexer.index_turn("u", "s", 0, "hello", timestamp=datetime(1970, 1, 1, tzinfo=UTC))
    assert report.inserted == 1
    assert rows(db)[0][2] == datetime(1970, 1, 1, tzinfo=UTC)


def test_timestamps_outside_datetimes_range_in_utc_are_refused() -> None:
    with pytest.raises(InvalidContentError, match="on or after 1970-01-01T00:00:00Z"):
        check_not_future(datetime(1, 1, 1, tzinfo=PLUS_ONE))
    with pytest.raises(InvalidContentError, match="in the future"):
        check_not_future(datetime(9999, 12, 31, 23, 59, tzinfo=MINUS_ONE))
    with pytest.raises(InvalidContentError, match="in the future"):
        check_not_future(datetime(9999, 12, 31, tzinfo=UTC))
    # the offset counts: this is 1970-01-01T04:00:00Z
    late_1969 = datetime(1969, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))
    assert check_not_future(late_1969) == late_1969


# -- session ids --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "session_id",
    ["a/b", "x\ny", "..\\..", "   ", "", "s" * 201, "a\x00b", "a\x7fb", "a\x85b", "a\x9fb",
     "a\u2028b", "a\ud800b", "\u202eabc", "a\u202ab", "a\u2066b", "a\u2069"],
)  # fmt: skip
def test_one_session_id_rule_for_the_library(db: Database, session_id: str) -> None:
    refused = "^(invalid session_id|session_id is empty)"
    with pytest.raises(InvalidSessionIdError, match=refused):
        check_session_id(session_id)
    indexer = Indexer(db.sessions, None)
    with pytest.raises(RoundsInvalidError, match=refused) as info:
        indexer.index_turn("u", session_id, 0, "hello", timestamp=WHEN)
    assert isinstance(info.value, ValueError)
    assert rows(db) == []


@pytest.mark.parametrize(
    "session_id",
    ["chat-2026.12.03", "a:b_c", "会话一", "a b", "s" * 200, "שיחה-1", "👨\u200d👩\u200d👧"],
)
def test_allowed_session_ids(session_id: str) -> None:
    assert check_session_id(session_id) == session_id


@pytest.mark.parametrize(
    ("session_id", "named"),
    [
        ("\u202eabc", "character 1 is U+202E RIGHT-TO-LEFT OVERRIDE (a bidirectional control"),
        ("chat\u2067x", "character 5 is U+2067 RIGHT-TO-LEFT ISOLATE (a bidirectional control"),
        ("a/b", "character 2 is '/' (a path separator)"),
        ("caf\ufffd", "character 4 is U+FFFD REPLACEMENT CHARACTER (it stands where text was"),
        ("a\x85b", "character 2 is U+0085 (a control character or line separator)"),
    ],
)
def test_a_refused_session_id_names_the_character_and_the_fix(session_id: str, named: str) -> None:
    """A bidi override displayed the id reversed ("session 7 nrut · cba"); it is refused
    with the character named, as is every other refused character."""
    with pytest.raises(InvalidSessionIdError) as info:
        check_session_id(session_id)
    assert named in str(info.value)
    assert str(info.value).endswith(f"; {SESSION_ID_HINT}")  # the short rule follows


# -- text UTF-8 cannot encode -------------------------------------------------------------


@pytest.mark.parametrize("field", ["user_message", "assistant_reply"])
def test_lone_surrogates_in_the_text_are_refused(db: Database, field: str) -> None:
    indexer = Indexer(db.sessions, None)
    texts = {"user_message": "hi", "assistant_reply": "ok", field: "bad \ud800 text"}
    with pytest.raises(RoundsInvalidError, match=f"{field} is not valid Unicode"):
        indexer.index_turn("u", "s", 0, texts["user_message"], texts["assistant_reply"], WHEN)
    assert rows(db) == []


def test_each_refused_round_names_its_field(db: Database) -> None:
    """``RoundsInvalidError.errors`` (the batch 422's list) says which input of each round is
    at fault, as a one-round call's ``field`` does; None for a refusal of no one input."""
    indexer = Indexer(db.sessions, None)
    rounds = [
        Round("s", 0, "fine", "", WHEN),
        Round("a/b", 1, "hi", "", WHEN),
        Round("s", 2, "hi", "", WHEN, source_ids="s:2"),  # type: ignore[arg-type]
        Round("s", 3, "", "", WHEN),
        Round("s", 4, "hi", "bad \ud800", WHEN),
    ]
    with pytest.raises(RoundsInvalidError) as info:
        indexer.index_rounds("u", rounds, embed=False)
    assert [(e["index"], e["field"]) for e in info.value.errors] == [
        (1, "session_id"),
        (2, "source_ids"),
        (3, None),
        (4, "assistant_reply"),
    ]
    assert info.value.field is None  # several rounds: the call names none
    assert rows(db) == []


@pytest.mark.parametrize("user_id", ["\ud800", "abc\udfff", "\udcff"])
def test_user_ids_utf8_cannot_encode_are_refused(user_id: str) -> None:
    with pytest.raises(InvalidUserIdError, match="not valid Unicode"):
        validate_user_id(user_id)


# -- re-indexing without a timestamp ------------------------------------------------------


def test_reposting_an_undated_turn_with_the_same_text_changes_nothing(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "identical pancakes text", "sure")
    age(db, 3)  # indexed three days ago
    before = rows(db)
    report = indexer.index_turn("u", "s", 0, "identical pancakes text", "sure")
    assert (report.inserted, report.deleted, report.unchanged) == (0, 0, 1)
    assert rows(db) == before  # same row, same created_at (decay age not reset)
    # the batch path (import_rounds) too
    (again,) = indexer.index_rounds("u", [Round("s", 0, "identical pancakes text", "sure")])
    assert (again.inserted, again.deleted, again.unchanged) == (0, 0, 1)
    assert rows(db) == before


def test_reposting_an_undated_turn_with_new_text_is_dated_now(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "first words")
    age(db, 3)
    report = indexer.index_turn("u", "s", 0, "other words")
    assert (report.inserted, report.deleted) == (1, 1)
    ((_, _, created_at, _),) = rows(db)
    assert abs(datetime.now(UTC) - created_at) < timedelta(minutes=1)


def test_an_explicit_timestamp_still_replaces_the_stored_time(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "same words")
    report = indexer.index_turn("u", "s", 0, "same words", timestamp=WHEN)
    assert (report.inserted, report.deleted) == (1, 1)
    assert rows(db)[0][2] == WHEN


def test_an_undated_turn_keeps_its_time_when_only_its_context_changes(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_rounds("u", [Round("s", 0, "the first question"), Round("s", 1, "an answer")])
    age(db, 3)
    kept_time = rows(db)[1][2]
    reports = indexer.index_rounds(
        "u", [Round("s", 0, "the edited question", "", WHEN), Round("s", 1, "an answer")]
    )
    assert reports[1].inserted == 1  # its context (round 0's text) changed
    (_, _, first_time, _), (_, _, second_time, second_text) = rows(db)
    assert first_time == WHEN
    assert second_time == kept_time
    assert "the edited question" in second_text
