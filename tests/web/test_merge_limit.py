"""The page's merge (``POST web/merge``) takes its three texts at the file limit whatever
their JSON escapes, as a memory file's PUT takes one: each text is measured decoded
against the file limit, and the body may hold three files' worst-case JSON
(``file_request_bytes`` of three files). Against a real ``memstrata serve``; no browser.

Its body was held to MEMSTRATA_MAX_REQUEST_BYTES: with the file limit at the request
limit, a file of control characters (six bytes of JSON each) could not be merged at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from memstrata.config import FILE_BODY_ROOM, JSON_ESCAPE_BYTES
from tests.web.server import Serve

TIGHT = 16 * 1024
USER = "merge-limit"
# Three texts, each a file at the limit with every byte escaped, and the keys' room.
MERGE_BODY = 3 * JSON_ESCAPE_BYTES * TIGHT + FILE_BODY_ROOM


@pytest.fixture(scope="module")
def tight_server(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    serve = Serve(
        tmp_path_factory.mktemp("web-merge-limit"),
        {
            "MEMSTRATA_DATABASE_URL": pg_url,
            "MEMSTRATA_MAX_CONTENT_BYTES": str(TIGHT),
            "MEMSTRATA_MAX_REQUEST_BYTES": str(TIGHT),
        },
    )
    serve.start()
    yield serve
    serve.stop()


def _merge(server: Serve, body: bytes) -> tuple[int, dict[str, object]]:
    with server.rest(USER) as rest:
        answer = rest.post("/web/merge", content=body, headers={"Content-Type": "application/json"})
    return answer.status_code, answer.json()


def test_one_text_of_control_characters_at_the_limit_merges(tight_server: Serve) -> None:
    mine = "\x01" * TIGHT
    body = json.dumps({"base": "a", "mine": mine, "theirs": "a"}).encode()
    assert len(body) > JSON_ESCAPE_BYTES * TIGHT  # six times the request limit
    assert _merge(tight_server, body) == (200, {"merged": mine, "parts": None})


def test_three_texts_at_the_limit_merge(tight_server: Serve) -> None:
    base, theirs = "\x01" * TIGHT, "\x02" * TIGHT
    body = json.dumps({"base": base, "mine": base, "theirs": theirs}).encode()
    assert 3 * JSON_ESCAPE_BYTES * TIGHT < len(body) <= MERGE_BODY
    assert _merge(tight_server, body) == (200, {"merged": theirs, "parts": None})


def test_a_text_one_byte_over_is_the_file_limits_refusal(tight_server: Serve) -> None:
    body = json.dumps({"base": "a", "mine": "\x01" * (TIGHT + 1), "theirs": "a"}).encode()
    status, answer = _merge(tight_server, body)
    assert status == 413
    assert answer["detail"] == (
        f"mine is {TIGHT + 1} bytes, over the limit of {TIGHT} bytes (shorten the file; an "
        "operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
    )


def test_a_body_past_three_files_is_the_body_limits_413(tight_server: Serve) -> None:
    head = b'{"base": "", "theirs": "", "mine": "'
    past = head + b"x" * (MERGE_BODY - len(head) - 2 + 1) + b'"}'
    assert len(past) == MERGE_BODY + 1
    status, answer = _merge(tight_server, past)
    assert status == 413
    assert answer["code"] == "payload_too_large"
    assert isinstance(answer["detail"], str)
    assert answer["detail"].startswith(
        f"request body is {len(past)} bytes, over the limit of {MERGE_BODY} bytes"
    )
