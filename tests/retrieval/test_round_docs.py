"""Building a batch of rounds' docs from the rows their neighbours stored: pure functions,
fed with rows made here (the indexer reads them from PostgreSQL in test_rounds.py and
test_neighbour_races.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from memstrata.retrieval.records import StoredChunk
from memstrata.retrieval.round_docs import (
    neighbour_paths,
    own_text,
    paths_to_read,
    round_docs,
    undated_paths,
)
from memstrata.retrieval.rounds import OwnRound, Round, validate_rounds
from memstrata.retrieval.staging import content_hash

STORED_AT = datetime(2026, 10, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 1, tzinfo=UTC)
CHUNK, CONTEXT = 200, 64


def own(*rounds: Round) -> list[OwnRound]:
    valid, errors = validate_rounds(rounds, NOW)
    assert not errors
    return valid


def stored_row(session: str, turn: int, text: str, row_id: int = 1) -> StoredChunk:
    return StoredChunk(
        id=row_id,
        file_path=f"sessions/{session}/{turn}",
        chunk_index=0,
        chunk_text=text,
        created_at=STORED_AT,
        content_hash=content_hash(text),
        embedding_model=None,
        embedding_dim=None,
        source_ids=(f"{session}:{turn}",),
        vector=None,
    )


def test_the_neighbours_are_the_rounds_before_and_after_not_in_the_batch() -> None:
    batch = {o.path: o for o in own(Round("s", 0, "a", timestamp=NOW), Round("s", 1, "b"))}
    assert neighbour_paths(batch) == {"sessions/s/2"}  # no turn -1; 0 and 1 are in it
    assert undated_paths(batch) == {"sessions/s/1"}
    far = {o.path: o for o in own(Round("t", 5, "x", timestamp=NOW))}
    assert neighbour_paths(far) == {"sessions/t/4", "sessions/t/6"}
    assert undated_paths(far) == set()


def test_paths_to_read_are_the_neighbours_and_the_undated_rounds_sorted() -> None:
    batch = own(Round("s", 3, "late"), Round("a", 1, "early", timestamp=NOW))
    assert paths_to_read(batch) == [
        "sessions/a/0",
        "sessions/a/2",
        "sessions/s/2",
        "sessions/s/3",
        "sessions/s/4",
    ]


def test_without_stored_neighbours_each_round_is_one_doc_with_the_batch_as_context() -> None:
    batch = own(
        Round("s", 0, "Did you paint that?", timestamp=NOW),
        Round("s", 1, "Yes, the lake sunrise.", timestamp=NOW),
    )
    docs, basis = round_docs(batch, [], CHUNK, CONTEXT)
    assert [d.file_path for d in docs] == ["sessions/s/0", "sessions/s/1"]
    assert docs[0].texts == ["User: Did you paint that?"] and docs[0].contexts == [None]
    assert docs[1].texts == ["User: Did you paint that?\nUser: Yes, the lake sunrise."]
    assert docs[1].contexts == [
        {"chars": len("User: Did you paint that?\n"), "source_ids": ["s:0"]}
    ]
    assert basis == {"sessions/s/2": frozenset()}  # read and found empty


def test_a_stored_previous_round_is_context_and_a_stored_next_round_is_rebuilt() -> None:
    before = stored_row("s", 4, "User: before", row_id=1)
    # The next round as stored: its context is the text round 5 had before this write.
    after = stored_row("s", 6, "User: old middle\nUser: after", row_id=2)._replace(
        context={"chars": len("User: old middle\n")}
    )
    batch = own(Round("s", 5, "middle", timestamp=NOW))
    docs, basis = round_docs(batch, [before, after], CHUNK, CONTEXT)
    assert [d.file_path for d in docs] == ["sessions/s/5", "sessions/s/6"]
    assert docs[0].texts == ["User: before\nUser: middle"]
    # The next round keeps its stored time and text; its context is now this round.
    assert docs[1].texts == ["User: middle\nUser: after"]
    assert docs[1].created_at == STORED_AT
    assert basis == {
        "sessions/s/4": frozenset({(0, before.content_hash)}),
        "sessions/s/6": frozenset({(0, after.content_hash)}),
    }


def test_a_round_resent_without_a_timestamp_keeps_its_stored_time_if_unchanged() -> None:
    same = own(Round("s", 0, "hello"))
    assert same[0].created_at == NOW and own_text(same[0], CHUNK) == "User: hello"
    row = stored_row("s", 0, "User: hello")
    [doc], _ = round_docs(same, [row], CHUNK, CONTEXT)
    assert doc.created_at == STORED_AT
    changed = own(Round("s", 0, "hello again"))
    [doc], _ = round_docs(changed, [row], CHUNK, CONTEXT)
    assert doc.created_at == NOW
    dated = own(Round("s", 0, "hello", timestamp=NOW))
    [doc], _ = round_docs(dated, [row], CHUNK, CONTEXT)
    assert doc.created_at == NOW  # a timestamp given is the round's time
