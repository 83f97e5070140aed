"""LoCoMo: recall@k over evidence turns (``memstrata bench locomo``).

Each conversation is one user; each LoCoMo turn is one round (``"<speaker>: <text>"`` plus
the image caption) with its session's real timestamp; "now" (``as_of``) is the last
session's time; every category 1–4 question with evidence is asked. Score = mean fraction
of a question's evidence turns among the first k *turns* covered by the ranked results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memstrata.bench.harness import Case, Dataset, Question, balanced
from memstrata.retrieval.rounds import Round

_DIA = re.compile(r"^D(\d+):0*(\d+)$")
_SESSION_KEY = re.compile(r"^session_(\d+)$")


def normalise_dia_id(raw: str) -> str:
    """``D1:03`` → ``D1:3``; anything else is returned stripped."""
    raw = raw.strip()
    m = _DIA.match(raw)
    return f"D{m.group(1)}:{m.group(2)}" if m else raw


def evidence_ids(evidence: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in evidence:
        for part in str(item).split(";"):
            if part.strip():
                out.append(normalise_dia_id(part))
    return list(dict.fromkeys(out))


def parse_locomo_time(value: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` → an aware UTC datetime."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


@dataclass
class Conversation:
    user_id: str
    rounds: list[Round]
    now: datetime
    questions: list[tuple[str, list[str], int]]  # (question, evidence ids, category)


def load_conversations(path: Path, limit: int | None = None) -> list[Conversation]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of LoCoMo conversations")
    out = []
    for item in data[:limit]:
        conv = item["conversation"]
        rounds: list[Round] = []
        times: list[datetime] = []
        sessions = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.match(key)))
        for number, key in sessions:
            when = parse_locomo_time(conv[f"{key}_date_time"])
            times.append(when)
            for i, turn in enumerate(conv[key]):
                body = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    body += f" [shares a photo: {turn['blip_caption']}]"
                rounds.append(
                    Round(
                        f"session_{number}", i, body, "", when, [normalise_dia_id(turn["dia_id"])]
                    )
                )
        questions = [
            (q["question"], evidence_ids(q.get("evidence", [])), int(q["category"]))
            for q in item["qa"]
            if int(q.get("category", 0)) in (1, 2, 3, 4) and q.get("evidence")
        ]
        out.append(Conversation(f"locomo-{item['sample_id']}", rounds, max(times), questions))
    return out


def locomo_dataset(path: Path, limit: int | None = None) -> Dataset:
    """LoCoMo as a harness dataset: one case per conversation; ``limit`` = questions,
    balanced over the categories (and only the conversations they need are indexed)."""
    conversations = load_conversations(path)
    tagged = [
        (n, Question(q, tuple(evidence), conv.now, f"category {category}"))
        for n, conv in enumerate(conversations)
        for q, evidence, category in conv.questions
    ]
    chosen = balanced(tagged, lambda item: item[1].kind, limit)
    cases = []
    for n, conv in enumerate(conversations):
        questions = [q for m, q in chosen if m == n]
        if questions:
            cases.append(Case(conv.user_id, conv.rounds, questions))
    return Dataset("locomo", cases, unit=lambda turn: turn, depth=10)
