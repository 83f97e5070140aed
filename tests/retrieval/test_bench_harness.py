"""The benchmark harness's pure parts and dataset loaders (small synthetic inputs)."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstrata.bench.harness import balanced, distinct_units, score
from memstrata.bench.longmemeval import longmemeval_dataset, parse_lme_time, session_of
from memstrata.bench.madial import dialogue_query, madial_dataset


def test_balanced_takes_round_robin_over_kinds_in_file_order() -> None:
    items = ["a1", "a2", "a3", "b1", "b2", "c1"]
    assert balanced(items, lambda s: s[0], 4) == ["a1", "a2", "b1", "c1"]
    assert balanced(items, lambda s: s[0], None) == items
    assert balanced(items, lambda s: s[0], 99) == items
    assert balanced(items, lambda s: s[0], 0) == []


def test_scores() -> None:
    units = ["s1", "s2", "s3", "s4"]
    assert score(units, ["s2", "s4"], 2, "fraction") == 0.5
    assert score(units, ["s2", "s4"], 2, "all") == 0.0
    assert score(units, ["s2", "s4"], 4, "all") == 1.0
    assert score(units, ["s2", "s4"], 2, "any") == 1.0
    assert score(units, ["x"], 4, "any") == 0.0
    assert score(units, [], 4, "fraction") == 0.0


def test_distinct_units_counts_each_unit_once_in_rank_order() -> None:
    covered = [("s1:0", "s1:1"), ("s2:4",), ("s1:3",)]
    assert distinct_units(covered, session_of) == ["s1", "s2"]


def test_longmemeval_loader(tmp_path: Path) -> None:
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What is my dog's name?",
        "question_date": "2023/06/06 (Tue) 16:35",
        "answer": "Biscuit",
        "answer_session_ids": ["answer_1"],
        "haystack_dates": ["2023/01/13 (Fri) 20:00", "2023/02/01 (Wed) 09:00"],
        "haystack_session_ids": ["other_1", "answer_1"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "Any cookie ideas?"},
                {"role": "assistant", "content": "x"},
            ],
            [{"role": "user", "content": "My dog is Biscuit."}, {"role": "user", "content": " "}],
        ],
    }
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump([item, {**item, "question_id": "q2", "question_type": "temporal-reasoning"}], f)
    data = longmemeval_dataset(path, limit=1)
    assert data.scores == ("all", "any")
    (case,) = data.cases
    assert case.user_id == "lme-q1"
    assert [(r.session_id, r.turn_index, r.user_message) for r in case.rounds] == [
        ("other_1", 0, "Any cookie ideas?"),
        ("answer_1", 0, "My dog is Biscuit."),
    ]
    assert case.rounds[1].timestamp == datetime(2023, 2, 1, 9, 0, tzinfo=UTC)
    assert case.questions[0].gold == ("answer_1",)
    assert case.questions[0].as_of == parse_lme_time("2023/06/06 (Tue) 16:35")


def test_longmemeval_as_of_is_never_before_the_haystack(tmp_path: Path) -> None:
    """The dataset stamps some same-day sessions after the question; the question still
    comes after its whole haystack, so none of it may be left out as "later"."""
    item = {
        "question_id": "q1",
        "question_type": "temporal-reasoning",
        "question": "Which did I buy first?",
        "question_date": "2023/05/30 (Tue) 07:03",
        "answer_session_ids": ["a1", "a2"],
        "haystack_dates": ["2023/05/30 (Tue) 03:18", "2023/05/30 (Tue) 09:00"],
        "haystack_session_ids": ["a1", "a2"],
        "haystack_sessions": [
            [{"role": "user", "content": "I bought a necklace."}],
            [{"role": "user", "content": "I bought a photo album."}],
        ],
    }
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([item]), encoding="utf-8")
    (case,) = longmemeval_dataset(path).cases
    assert case.questions[0].as_of == parse_lme_time("2023/05/30 (Tue) 09:00")
    assert all(
        r.timestamp is not None and r.timestamp <= case.questions[0].as_of for r in case.rounds
    )


def test_madial_loader(tmp_path: Path) -> None:
    memory = [
        {"1": {"time": "2023-12-25", "event": "Bart在圣诞节晚会上跳舞", "user-id": 1, "id": "1"}},
        {"3": {"time": "2023-03-07", "event": "Bart获得一百米第一名", "user-id": 1, "id": "3"}},
    ]
    dialogue = {
        "dialogue": [
            "<BOD>\n",
            '<Bart>:"我要表演魔术！"\n',
            '<Assistant>:"你记得跳舞吗？"\n',
            "<EOD>\n",
        ],
        "test-turn": [2],
        "relevant-id": [1],
        "user-id": 1,
        "id": 0,
    }
    (tmp_path / "X-memory.json").write_text(
        "\n".join(json.dumps(m, ensure_ascii=False) for m in memory), encoding="utf-8"
    )
    (tmp_path / "X-dialogue.json").write_text(json.dumps(dialogue, ensure_ascii=False))
    data = madial_dataset(tmp_path)
    (case,) = data.cases
    assert [r.source_ids for r in case.rounds] == [["1"], ["3"]]
    assert case.questions[0].text == "Bart: 我要表演魔术！"
    assert case.questions[0].gold == ("1",)
    assert case.questions[0].as_of == datetime(2023, 12, 26, tzinfo=UTC)
    assert data.chinese
    with pytest.raises(ValueError, match="expected one file"):
        madial_dataset(tmp_path / "nothing-here")
    # The benchmark's own folder holds other settings' dialogues beside the main one.
    (tmp_path / "X-dialogue-setting2.json").write_text("not this one")
    assert madial_dataset(tmp_path).cases[0].questions[0].gold == ("1",)
    (tmp_path / "Y-dialogue.json").write_text("nor this one")
    found = "found X-dialogue-setting2.json, X-dialogue.json, Y-dialogue.json"
    with pytest.raises(ValueError, match=re.escape(found)):
        madial_dataset(tmp_path)


def test_dialogue_query_stops_before_the_test_turn() -> None:
    lines = ["<BOD>\n", '<A>:"one"\n', '<B>:"two"\n', '<A>:"three"\n']
    assert dialogue_query(lines, 3) == "A: one\nB: two"
