"""The LoCoMo harness's pure parts: id normalisation, evidence parsing, loading."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstrata.bench.http_common import locomo_texts
from memstrata.bench.locomo import (
    evidence_ids,
    load_conversations,
    normalise_dia_id,
    parse_locomo_time,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("D1:03", "D1:3"), ("D10:0", "D10:0"), (" D2:10 ", "D2:10"), ("D1:3", "D1:3"), ("x", "x")],
)
def test_normalise(raw: str, expected: str) -> None:
    assert normalise_dia_id(raw) == expected


def test_evidence_split_and_dedupe() -> None:
    assert evidence_ids(["D1:3; D1:05", "D1:3", "D2:1"]) == ["D1:3", "D1:5", "D2:1"]


def test_parse_time() -> None:
    assert parse_locomo_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_load_conversations(tmp_path: Path) -> None:
    data = [
        {
            "sample_id": "c1",
            "conversation": {
                "speaker_a": "A",
                "speaker_b": "B",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "A", "dia_id": "D1:1", "text": "hi"},
                    {"speaker": "B", "dia_id": "D1:02", "text": "look", "blip_caption": "a cat"},
                ],
                "session_2_date_time": "9:00 am on 1 June, 2023",
                "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "later"}],
            },
            "qa": [
                {"question": "q1", "evidence": ["D1:2"], "category": 1},
                {"question": "q5", "evidence": ["D1:1"], "category": 5},
                {"question": "q0", "evidence": [], "category": 2},
            ],
        }
    ]
    path = tmp_path / "l.json"
    path.write_text(json.dumps(data))
    (conv,) = load_conversations(path)
    assert conv.user_id == "locomo-c1"
    assert conv.now == datetime(2023, 6, 1, 9, 0, tzinfo=UTC)
    assert [r.source_ids for r in conv.rounds] == [["D1:1"], ["D1:2"], ["D2:1"]]
    assert conv.rounds[1].user_message == "B: look [shares a photo: a cat]"
    assert conv.questions == [("q1", ["D1:2"], 1)]
    turns, questions = locomo_texts(path, 3)  # the HTTP benchmarks' input
    assert turns == ["A: hi", "B: look [shares a photo: a cat]", "A: later"]
    assert questions == ["q1 (0)", "q1 (1)", "q1 (2)"]  # each text asked once
    assert locomo_texts(path, 1)[1] == ["q1"]
