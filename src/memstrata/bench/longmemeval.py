"""LongMemEval_S: are the answer sessions among the first k sessions found?

Each question is one user whose history is its haystack: the *user* turns of every
haystack session, indexed with the session's date as ``timestamp`` (one round per user
turn, ids ``<session_id>:<n>``). "Now" for decay is the question's ``question_date``, passed
as ``as_of`` — or the latest haystack session's date when that is later: the haystack
precedes the question by the benchmark's construction, but its times are synthetic: in 8
of the 60 dev questions some sessions are stamped up to 18 hours after the question, on
the same day — answer sessions in 5 of them, all temporal-reasoning. ``as_of`` leaves
out rows after it, so with ``question_date`` alone those answers could never be found.
Under the spec's decay (no floor) a later "now" multiplies every dated row's factor by
the same number, so the order of the rows that were already in is unchanged
(docs/BENCHMARKS.md). Score: ``recall_all`` (every answer session among the first k distinct
sessions of the ranking; the headline ``recall``) and ``recall_any`` (at least one, the
figure peers publish).
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstrata.bench.harness import Case, Dataset, Question, balanced
from memstrata.retrieval.rounds import Round


def parse_lme_time(value: str) -> datetime:
    """``2023/06/06 (Tue) 16:35`` → an aware UTC datetime."""
    return datetime.strptime(value.strip(), "%Y/%m/%d (%a) %H:%M").replace(tzinfo=UTC)


def session_of(turn_id: str) -> str:
    return turn_id.rsplit(":", 1)[0]


def _case(item: dict[str, Any]) -> Case:
    rounds: list[Round] = []
    seen: set[str] = set()
    latest = parse_lme_time(item["question_date"])
    for sid, date, turns in zip(
        item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True
    ):
        if sid in seen:
            continue
        seen.add(sid)
        when = parse_lme_time(date)
        latest = max(latest, when)
        user_turns = [t["content"] for t in turns if t.get("role") == "user"]
        for n, content in enumerate(c for c in user_turns if isinstance(c, str) and c.strip()):
            rounds.append(Round(sid, n, content, "", when, [f"{sid}:{n}"]))
    question = Question(
        item["question"],
        tuple(item["answer_session_ids"]),
        latest,
        item["question_type"],
    )
    return Case(f"lme-{item['question_id']}", rounds, [question])


def longmemeval_dataset(path: Path, limit: int | None = None) -> Dataset:
    """``limit``: the first N questions balanced over ``question_type``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of LongMemEval questions")
    chosen = balanced(data, lambda item: str(item["question_type"]), limit)
    return Dataset(
        "longmemeval",
        [_case(item) for item in chosen],
        unit=session_of,
        scores=("all", "any"),
        depth=50,
    )
