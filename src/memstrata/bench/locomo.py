"""LoCoMo retrieval quality: recall@k over evidence turns, through the real code paths.

Each conversation is one user. Every session's turns go in through ``Indexer.index_rounds``
with their real session timestamps; "now" is the last session's time; every category 1–4
question runs through ``SearchService``. Score = mean fraction of a question's evidence turns
found among the first k *turns* covered by the ranked results (a chunk holding several
turns counts each, cut at k turns).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text

from memstrata.retrieval.indexer import Round
from memstrata.retrieval.search import DecayPolicy, rank
from memstrata.runtime import Memstrata

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


def recall_at_k(ranked_turns: Sequence[Sequence[str]], evidence: Sequence[str], k: int) -> float:
    """Fraction of ``evidence`` among the first ``k`` distinct turns of the ranking."""
    seen: list[str] = []
    for turns in ranked_turns:
        for t in turns:
            if t not in seen:
                seen.append(t)
    first = set(seen[:k])
    return sum(1 for e in evidence if e in first) / len(evidence) if evidence else 0.0


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


# Benchmark-side configuration: which retrievers feed the fusion, and which decay applies
# (the production SearchService always uses both and the configured decay).
VARIANTS: dict[str, dict[str, Any]] = {
    "bm25": {"bm25": True, "vector": False, "decay": DecayPolicy(enabled=False)},
    "vector": {"bm25": False, "vector": True, "decay": DecayPolicy(enabled=False)},
    "hybrid": {"bm25": True, "vector": True, "decay": DecayPolicy(enabled=False)},
    # The spec's decay whatever MEMSTRATA_DECAY_* says: 30-day half-life, no floor.
    "hybrid_spec_decay": {"bm25": True, "vector": True, "decay": DecayPolicy(True, 30.0, 0.0)},
}


@dataclass
class LocomoResult:
    questions: int = 0
    recall: dict[str, dict[str, float]] = field(default_factory=dict)
    index_seconds: float = 0.0
    embed_seconds: float = 0.0
    rounds: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "questions": self.questions,
                "recall": {
                    v: {k: round(x, 4) for k, x in ks.items()} for v, ks in self.recall.items()
                },
            }
        )


def run_locomo(
    mem: Memstrata,
    path: Path,
    ks: Sequence[int] = (5, 10),
    *,
    variants: dict[str, dict[str, Any]] | None = None,
    limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> LocomoResult:
    variants = variants or VARIANTS
    result = LocomoResult()
    sums: dict[str, dict[int, float]] = {v: dict.fromkeys(ks, 0.0) for v in variants}
    for conv in load_conversations(path, limit):
        _clear_user(mem, conv.user_id)
        started = time.perf_counter()
        reports = mem.indexer.index_rounds(conv.user_id, conv.rounds)
        result.index_seconds += time.perf_counter() - started
        result.embed_seconds += sum(r.embed_seconds for r in reports)
        result.rounds += len(conv.rounds)
        if progress:
            progress(f"{conv.user_id}: {len(conv.rounds)} turns, {len(conv.questions)} questions")
        for question, evidence, _category in conv.questions:
            vector = _query_vector(mem, question)
            result.questions += 1
            for name, spec in variants.items():
                for k in ks:
                    found = mem.search.candidates(
                        conv.user_id,
                        question,
                        vector if spec["vector"] else None,
                        k * mem.search.candidate_multiplier,
                    )
                    if not spec["bm25"]:
                        found = replace(found, bm25=[])
                    hits = rank(
                        found, top_k=k, now=conv.now, decay=spec["decay"], rrf_k=mem.search.rrf_k
                    )
                    turns = [h.source_ids for h in hits]
                    sums[name][k] += recall_at_k(turns, evidence, k)
    n = max(result.questions, 1)
    result.recall = {v: {str(k): s / n for k, s in ks_.items()} for v, ks_ in sums.items()}
    return result


def _query_vector(mem: Memstrata, question: str) -> np.ndarray | None:
    if mem.embedder is None:
        return None
    return np.asarray(mem.embedder.embed([question], "query")[0], dtype=np.float32)


def _clear_user(mem: Memstrata, user_id: str) -> None:
    with mem.db.engine.begin() as conn:
        conn.execute(text("DELETE FROM memory_embeddings WHERE user_id = :u"), {"u": user_id})
        conn.execute(
            text(
                "INSERT INTO memory_index_state (user_id, generation) VALUES (:u, 1) "
                "ON CONFLICT (user_id) DO UPDATE SET generation = memory_index_state.generation + 1"
            ),
            {"u": user_id},
        )
