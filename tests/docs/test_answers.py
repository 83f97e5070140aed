"""The matcher that compares real answers with the answers the docs show (tests/docs/answers.py):
what each ``…`` allows, and that nothing else is let through."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.docs.answers import (
    ANY,
    Answer,
    Open,
    Step,
    answer_mismatches,
    head_mismatches,
    mismatches,
    parse_pattern,
    text_matches,
    transcript,
)


def _matches(shown: str, actual: Any) -> bool:
    return not mismatches(parse_pattern(shown), actual)


def test_parse_reads_elisions_and_plain_json() -> None:
    assert parse_pattern('{"a": …, "b": [1, …], …}') == Open({"a": ANY, "b": Open([1])})
    assert parse_pattern('{"a":"…"}') == {"a": "…"}
    assert parse_pattern(" [ ] ") == []
    text = '{"x": [1, 2.5, true, null, {"y": "z"}], "w": "\\u00e9"}'
    assert parse_pattern(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1} x',  # more after the value
        '{"a": 1, "a": 2}',  # a key twice
        '{…, "a": 1}',  # … only as the last member
        "[…, 1]",  # … only as the last item
        '{"a" 1}',
        "[1 2]",
        '{"a": …',
        "{1: 2}",
        "",
    ],
)
def test_parse_refuses_what_is_not_a_documented_value(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pattern(text)


def test_a_complete_object_must_be_equal() -> None:
    assert _matches('{"a": 1, "b": "x"}', {"b": "x", "a": 1})
    assert not _matches('{"a": 1}', {"a": 1, "b": 2})  # a field the doc does not show
    assert not _matches('{"a": 1, "b": 2}', {"a": 1})
    assert not _matches('{"a": 1}', {"a": 2})
    assert not _matches('{"a": 1}', {"a": True})  # 1 == True in Python, not in JSON
    assert not _matches('{"a": true}', {"a": 1})
    assert not _matches('{"a": 1}', {"a": 1.5})
    assert not _matches('{"a": null}', {"a": False})
    assert not _matches('{"a": 1}', [1])
    assert not _matches('{"a": {"b": 1}}', {"a": {"b": 1, "c": 2}})  # nested too


def test_an_open_object_allows_more_members_only() -> None:
    assert _matches('{"a": 1, …}', {"a": 1, "b": 2})
    assert _matches("{…}", {})
    assert not _matches('{"a": 1, …}', {"b": 2})
    assert not _matches('{"a": 1, …}', {"a": 2, "b": 2})
    assert not _matches("{…}", [])


def test_arrays() -> None:
    assert _matches("[1, 2]", [1, 2])
    assert not _matches("[1, 2]", [1, 2, 3])
    assert not _matches("[1, 2]", [2, 1])
    assert _matches("[1, …]", [1, 2, 3])
    assert _matches("[1, …]", [1])
    assert not _matches("[1, …]", [2, 1])
    assert not _matches("[1, …]", [])
    assert _matches("[…]", [])
    assert not _matches("[…]", {})


def test_a_bare_ellipsis_is_any_value() -> None:
    for value in (None, 1, "x", [1], {"a": 1}):
        assert _matches('{"a": …}', {"a": value})
    assert not _matches('{"a": …}', {})  # but the member must be there


@pytest.mark.parametrize(
    ("shown", "actual", "ok"),
    [
        ("…", "", True),
        ("…", "anything", True),
        ("abc", "abc", True),
        ("abc", "abcd", False),
        ("ab…", "abcd", True),
        ("ab…", "xabcd", False),
        ("…cd", "abcd", True),
        ("…cd", "abcdx", False),
        ("a…d", "abcd", True),
        ("a…d", "ad", True),
        ("aa…aa", "aaa", False),  # head and tail may not overlap
        ("a…b…c", "axbyc", True),
        ("a…b…c", "acb", False),
        ("a…b…c", "abc", True),
        ("x…y…y", "xy", False),
    ],
)
def test_text_with_ellipses(shown: str, actual: str, ok: bool) -> None:
    assert text_matches(shown, actual) is ok
    assert _matches(json.dumps({"s": shown}), {"s": actual}) is ok


def test_the_same_text_is_the_detail_word_for_word() -> None:
    shown = (
        '{"detail": "d…", "message": "…the same text…", "error": {"message": "…the same text…"}}'
    )
    assert _matches(shown, {"detail": "dx", "message": "dx", "error": {"message": "dx"}})
    assert not _matches(shown, {"detail": "dx", "message": "dx", "error": {"message": "dy"}})
    assert not _matches('{"message": "…the same text…"}', {"message": "x"})  # no detail


def _curl_i(status: str, headers: str, body: str) -> Answer:
    return Answer.read(f"{status}\r\n{headers}\r\n\r\n{body}", with_head=True)


def test_a_head_shows_the_status_line_and_some_headers() -> None:
    answer = _curl_i("HTTP/1.1 200 OK", 'date: x\r\nETag: "1"', '{"v": 1}')
    assert answer.headers == [("date", "x"), ("etag", '"1"')]
    assert not answer_mismatches(['HTTP/1.1 200 OK … etag: "1"', '{"v": 1}'], answer)
    assert not head_mismatches(["HTTP/1.1 200 OK", 'ETag: "1"'], answer)  # an http block
    assert head_mismatches(["HTTP/1.1 200 OK", 'ETag: "2"'], answer)
    assert not answer_mismatches(["HTTP/1.1 200 OK", '{"v": …}'], answer)
    assert answer_mismatches(['HTTP/1.1 200 OK … etag: "2"', '{"v": 1}'], answer)
    assert answer_mismatches(['HTTP/1.1 201 Created … etag: "1"', '{"v": 1}'], answer)
    assert answer_mismatches(["HTTP/1.1 200 OK … vary: x", '{"v": 1}'], answer)
    assert answer_mismatches(["HTTP/1.1 200", '{"v": 1}'], answer)  # the whole status line
    assert answer_mismatches(["HTTP/1.1 200 OK"], answer)  # a body not shown
    continued = Answer.read("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 409 Conflict\r\n\r\n{}", True)
    assert continued.status == "HTTP/1.1 409 Conflict" and continued.body == "{}"


def test_body_lines_json_sse_and_text() -> None:
    sse = Answer.read('event: message\r\ndata: {"id": 1, "r": "x"}\r\n\r\n', with_head=False)
    assert not answer_mismatches(["event: message", 'data: {"id": 1, …}'], sse)
    assert answer_mismatches(["event: message", 'data: {"id": 2, …}'], sse)
    assert answer_mismatches(["event: other", 'data: {"id": 1, …}'], sse)
    assert answer_mismatches(['data: {"id": 1, …}'], sse)  # a line not shown
    assert answer_mismatches(['{"id": 1, …}'], Answer.read("not json", with_head=False))
    assert not answer_mismatches(["tok…"], Answer.read("token\n", with_head=False))


def test_transcript_steps_and_answers() -> None:
    block = "\n".join(
        [
            "export A=1",
            "",
            "# what comes next: not an answer",
            "curl -s x \\",
            "     -d '{}' \\",
            "     y",
            "# HTTP/1.1 200 OK",
            '# {"a": 1}',
            "",
            "# prose",
            "curl z",
            "curl w",
            "# {}",
        ]
    )
    assert transcript(block) == [
        Step("export A=1", []),
        Step("curl -s x \\\n     -d '{}' \\\n     y", ["HTTP/1.1 200 OK", '{"a": 1}']),
        Step("curl z", []),
        Step("curl w", ["{}"]),
    ]
    with pytest.raises(AssertionError):
        transcript("curl -s \\")
