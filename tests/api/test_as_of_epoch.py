"""``as_of`` and a turn's ``timestamp`` share one earliest time, the Unix epoch, refused
with one message shape. ``as_of`` 1969 was searched (every dated row left out) while a 1969
``timestamp`` was a 422."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from memstrata.errors import InvalidContentError
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader

SEARCH = "/api/memory/search"
TURN = "/api/memory/conversations/s1/turns"
EARLY = ["1969-12-31T23:59:59Z", "1900-06-01T00:00:00+02:00", "0001-01-01T00:00:00+05:00"]


def _rule(name: str) -> str:
    return f"{name} must be on or after 1970-01-01T00:00:00Z"


@pytest.mark.parametrize("when", EARLY)
def test_an_as_of_before_the_epoch_is_refused_as_a_timestamp_is(
    client: TestClient, auth: AuthHeader, when: str
) -> None:
    search = client.post(SEARCH, headers=auth(), json={"query": "kite", "as_of": when})
    turn = client.post(
        TURN, headers=auth(), json={"turn_index": 0, "user_message": "kite", "timestamp": when}
    )
    assert (search.status_code, turn.status_code) == (422, 422), (search.text, turn.text)
    assert search.json()["code"] == turn.json()["code"] == "validation_error"
    as_of_detail, timestamp_detail = search.json()["detail"], turn.json()["detail"]
    assert _rule("as_of") in as_of_detail and "future" not in as_of_detail
    assert _rule("timestamp") in timestamp_detail
    # one shape: the same words once the field's name is swapped
    prefix = as_of_detail.split(" (", 1)[0].replace("as_of", "timestamp")
    assert prefix == timestamp_detail.split(" (", 1)[0]


def test_the_epoch_itself_is_a_valid_as_of(client: TestClient, auth: AuthHeader) -> None:
    answer = client.post(
        SEARCH, headers=auth(), json={"query": "kite", "as_of": "1970-01-01T00:00:00Z"}
    )
    assert answer.status_code == 200, answer.text


def test_the_library_refuses_it_the_same_way(mem: Memstrata) -> None:
    with pytest.raises(InvalidContentError, match=_rule("as_of")) as caught:
        mem.search.search("alice", "kite", as_of=datetime(1969, 12, 31, tzinfo=UTC))
    assert caught.value.field == "as_of"
