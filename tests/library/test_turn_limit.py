"""The library refuses a turn over the size limit as REST and MCP do, before anything is
chunked, embedded or stored: ``index_turn`` and ``import_rounds`` (all or nothing)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.rounds import Round, RoundsInvalidError
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES
from memstrata.runtime import Memstrata

OVER = "word " * (MAX_TURN_BYTES // 5 + 1)  # 262,145 bytes


def stored_rows(db: Database, user: str) -> int:
    with db.engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(*) FROM memory_embeddings WHERE user_id = :u"), {"u": user}
        ).scalar_one()
    return int(count)


def test_index_turn_refuses_a_turn_over_the_limit(
    open_runtime: Callable[..., Memstrata], db: Database
) -> None:
    mem = open_runtime()
    with pytest.raises(RoundsInvalidError) as info:
        mem.indexer.index_turn("lib-user", "s", 0, OVER, "ok")
    assert str(info.value).startswith(
        f"user_message and assistant_reply are {len(OVER) + 2} bytes together, over the limit "
        f"of {MAX_TURN_BYTES} bytes (UTF-8) for one turn's user_message and assistant_reply; "
        "split the text over several turns"
    )
    assert info.value.errors[0]["field"] == "user_message"
    assert stored_rows(db, "lib-user") == 0


def test_import_rounds_stores_nothing_when_one_turn_is_over_the_limit(
    open_runtime: Callable[..., Memstrata], db: Database
) -> None:
    mem = open_runtime()
    rounds = [Round("s", 0, "hello"), Round("s", 1, OVER), Round("s", 2, "bye")]
    with pytest.raises(RoundsInvalidError) as info:
        mem.import_rounds("lib-user", rounds)
    assert str(info.value).startswith("1 of 3 turns are invalid, nothing was stored; first: ")
    (entry,) = info.value.errors
    assert (entry["index"], entry["field"]) == (1, "user_message")
    assert f"over the limit of {MAX_TURN_BYTES} bytes" in entry["error"]
    assert stored_rows(db, "lib-user") == 0
    # the same rounds cut to the limit are stored
    rounds[1] = Round("s", 1, OVER[:MAX_TURN_BYTES])
    assert len(mem.import_rounds("lib-user", rounds)) == 3
