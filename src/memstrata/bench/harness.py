"""One retrieval-quality harness for every dataset: memstrata's variants next to peers.

A dataset is a list of cases; a case is one user's conversation history (``Round`` s with
their real timestamps) and the questions asked of it, each with its gold units (turn,
session or event ids), an "as of" time and a type. For each case the harness:

1. stores the history through ``Indexer.index_rounds`` — the service call behind
   ``POST /api/memory/conversations/turns:batch`` — in batches of at most
   ``MAX_BATCH_TURNS``;
2. refuses to go on when any stored row lacks a vector (an embedding failure), because a
   "hybrid" figure without vectors would be a BM25 figure under a false name;
3. asks every question through ``SearchService.search_with_vector`` with ``as_of`` = the
   question's time, once per variant, and through the peers (``bench.peers``) built on
   the same rounds in the same run.

Scores cut the ranking at the first k distinct *units* covered by the hits (a hit holding
two turns uses two of the k): ``fraction`` = share of the gold units found (LoCoMo,
MADial), ``all`` = 1 when every gold unit is found (LongMemEval's recall_all), ``any`` = 1
when one is (recall_any).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

import numpy as np

from memstrata.bench.peers import PeerIndex, fuse_keys
from memstrata.db.engine import transaction
from memstrata.retrieval.bm25_index import BM25Index
from memstrata.retrieval.fusion import Fusion
from memstrata.retrieval.ranking import DecayPolicy, SearchHit, SearchResponse, rank
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import MAX_BATCH_TURNS, Round
from memstrata.retrieval.tokenize import tokenize
from memstrata.runtime import Memstrata

SPEC_DECAY = DecayPolicy(True, 30.0, 0.0)
RECOMMENDED_FLOOR = DecayPolicy(True, 30.0, 0.9)  # docs/BENCHMARKS.md, decay grid
NO_DECAY = DecayPolicy(enabled=False)
# The issue's recall@5 and @10: the depths every benchmark reports, and its scripts' default.
KS: tuple[int, ...] = (5, 10)


@dataclass(frozen=True)
class Variant:
    use_bm25: bool
    use_vector: bool
    decay: DecayPolicy
    min_candidates: int | None = None  # None: the service's setting
    fusion: Fusion = "rrf"  # the spec's, whatever the service's MEMSTRATA_SEARCH_FUSION
    # Decay within the relevance pool (opt-in) instead of the spec's over every candidate,
    # whatever the service's MEMSTRATA_DECAY_POOL.
    decay_pool: bool = False


VARIANTS: dict[str, Variant] = {
    "bm25": Variant(True, False, NO_DECAY),
    "vector": Variant(False, True, NO_DECAY),
    "hybrid": Variant(True, True, NO_DECAY),
    "hybrid_spec_decay": Variant(True, True, SPEC_DECAY),
    # The opt-in relevance pool beside the spec's decay over every candidate.
    "hybrid_spec_decay_pool": Variant(True, True, SPEC_DECAY, decay_pool=True),
    "hybrid_floor0.9": Variant(True, True, RECOMMENDED_FLOOR),
    # The opt-in convex score fusion beside the spec's RRF rows (docs/BENCHMARKS.md).
    "hybrid_convex": Variant(True, True, NO_DECAY, fusion="convex"),
    "hybrid_convex_spec_decay": Variant(True, True, SPEC_DECAY, fusion="convex"),
}


def depth_grid(mins: Sequence[int]) -> dict[str, Variant]:
    """Hybrid with and without the spec's decay at several minimum candidate depths."""
    grid = {}
    for m in mins:
        grid[f"hybrid_min{m}"] = Variant(True, True, NO_DECAY, m)
        grid[f"hybrid_spec_decay_min{m}"] = Variant(True, True, SPEC_DECAY, m)
    return grid


T = TypeVar("T")


def balanced(items: Iterable[T], kind: Callable[[T], str], limit: int | None) -> list[T]:
    """The first ``limit`` items taken round-robin over their kinds (all when None),
    returned in their original order."""
    items = list(items)
    if limit is None or limit >= len(items):
        return items
    queues: dict[str, list[int]] = {}
    for n, item in enumerate(items):
        queues.setdefault(kind(item), []).append(n)
    picked: list[int] = []
    depth = 0
    while len(picked) < limit:
        for queue in queues.values():
            if depth < len(queue) and len(picked) < limit:
                picked.append(queue[depth])
        depth += 1
    return [items[n] for n in sorted(picked)]


class BenchError(RuntimeError):
    """The benchmark cannot give an honest number (missing vectors, bad input)."""


@dataclass(frozen=True)
class Question:
    text: str
    gold: tuple[str, ...]
    as_of: datetime
    kind: str = ""


@dataclass
class Case:
    user_id: str
    rounds: list[Round]
    questions: list[Question]


@dataclass
class Dataset:
    name: str
    cases: list[Case]
    unit: Callable[[str], str]  # a turn id (source id) -> the unit scored
    scores: tuple[str, ...] = ("fraction",)  # first is "recall"; "any" adds recall_any
    depth: int = 10  # hits fetched per search (units are cut from them)
    chinese: bool = False  # also score the BM25 without character bigrams


@dataclass
class BenchResult:
    dataset: str
    questions: int = 0
    rows: int = 0
    rows_with_vectors: int = 0
    turns: int = 0
    index_seconds: float = 0.0
    sums: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)
    # Questions whose first 5 hits at top_k=5 equal the first 5 at the full depth.
    stable: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)

    def table(self, score: str) -> dict[str, dict[str, float]]:
        n = max(self.questions, 1)
        return {
            v: {str(k): round(s / n, 4) for k, s in ks.items()}
            for v, ks in self.sums.get(score, {}).items()
        }

    def to_json(self, scores: Sequence[str]) -> str:
        out: dict[str, Any] = {"questions": self.questions, "recall": self.table(scores[0])}
        if "any" in scores:
            out["recall_any"] = self.table("any")
        out["rows"] = self.rows
        out["rows_with_vectors"] = self.rows_with_vectors
        return json.dumps(out)


def score(units: Sequence[str], gold: Sequence[str], k: int, how: str) -> float:
    first = set(units[:k])
    found = sum(1 for g in gold if g in first)
    if how == "all":
        return 1.0 if gold and found == len(gold) else 0.0
    if how == "any":
        return 1.0 if found else 0.0
    return found / len(gold) if gold else 0.0


def distinct_units(covered: Sequence[Sequence[str]], unit: Callable[[str], str]) -> list[str]:
    seen: dict[str, None] = {}
    for ids in covered:
        for i in ids:
            seen.setdefault(unit(i), None)
    return list(seen)


def run(
    mem: Memstrata,
    dataset: Dataset,
    ks: Sequence[int] = KS,
    *,
    peers: bool = True,
    variants: dict[str, Variant] | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchResult:
    if mem.embedder is None:
        raise BenchError("no embedding API: a hybrid benchmark needs one")
    if not dataset.cases or not any(c.questions for c in dataset.cases):
        raise BenchError(f"{dataset.name}: no questions in the input")
    say = progress or (lambda _m: None)
    result = BenchResult(dataset.name)
    for case in dataset.cases:
        ingest(mem, case, result)
        peer = PeerIndex(case.rounds, mem.embedder) if peers else None
        unigram = _unigram_bm25(mem, case.user_id) if dataset.chinese else None
        for q in case.questions:
            ranked = _rankings(
                mem, dataset, case, q, peer, unigram, variants or VARIANTS, result.stable
            )
            result.questions += 1
            for name, covered in ranked.items():
                units = distinct_units(covered, dataset.unit)
                for how in dataset.scores:
                    per_k = result.sums.setdefault(how, {}).setdefault(name, {})
                    for k in ks:
                        per_k[k] = per_k.get(k, 0.0) + score(units, q.gold, k, how)
                kind = result.by_kind.setdefault(f"{name}@{max(ks)}:{q.kind}", {})
                kind["n"] = kind.get("n", 0) + 1
                kind["sum"] = kind.get("sum", 0.0) + score(
                    units, q.gold, max(ks), dataset.scores[0]
                )
        say(
            f"{case.user_id}: {len(case.rounds)} turns, {len(case.questions)} questions "
            f"({result.questions} so far)"
        )
    return result


def ingest(mem: Memstrata, case: Case, result: BenchResult) -> None:
    """Store ``case``'s history through the batch path (replacing any earlier run's); raise
    ``BenchError`` when any stored row lacks a vector."""
    clear_user(mem, case.user_id)
    started = time.perf_counter()
    failed = 0
    for start in range(0, len(case.rounds), MAX_BATCH_TURNS):
        reports = mem.indexer.index_rounds(
            case.user_id, case.rounds[start : start + MAX_BATCH_TURNS]
        )
        failed += sum(r.embedding_failed for r in reports)
    result.index_seconds += time.perf_counter() - started
    result.turns += len(case.rounds)
    with mem.db.sessions() as session:
        repo = EmbeddingRepository(session, case.user_id)
        total = repo.count()
        # Without a model, no row has a vector of it.
        missing = total if mem.embedder is None else repo.count_missing(mem.embedder.name)
    with_vectors = total - missing
    result.rows += total
    result.rows_with_vectors += with_vectors
    if failed or with_vectors < total:
        raise BenchError(
            f"{case.user_id}: {total - with_vectors} of {total} rows have no vector "
            f"(embedding failures: {failed}); refusing to report hybrid or vector recall "
            "without vectors — check the embedding API and run again"
        )


def _rankings(
    mem: Memstrata,
    dataset: Dataset,
    case: Case,
    q: Question,
    peer: PeerIndex | None,
    unigram: BM25Index[tuple[str, int]] | None,
    variants: dict[str, Variant],
    stable: dict[str, int],
) -> dict[str, list[tuple[str, ...]]]:
    """Each variant's ranked hits, as the turn ids each hit covers."""
    assert mem.embedder is not None
    vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
    out: dict[str, list[tuple[str, ...]]] = {}
    hits_of: dict[str, list[SearchHit]] = {}
    for name, v in variants.items():
        first5, response = (
            _variant_search(
                mem,
                case.user_id,
                q,
                vector,
                v,
                top_k,
                mem.search.candidate_depth(top_k, v.decay, v.min_candidates),
            )
            for top_k in (5, dataset.depth)
        )
        same = [h.source_ids for h in first5.hits] == [h.source_ids for h in response.hits[:5]]
        stable[name] = stable.get(name, 0) + int(same)
        if v.use_vector and response.mode != "hybrid":
            raise BenchError(f"{case.user_id}: search ran without vectors ({response.mode})")
        hits_of[name] = response.hits
        out[name] = [h.source_ids for h in response.hits]
    if unigram is not None:
        depth = mem.search.candidate_depth(dataset.depth, NO_DECAY)  # as `hybrid`
        bm25_keys = [key for key, _ in unigram.top_n(tokenize(q.text, cjk_bigrams=False), depth)]
        covered = _covered_rows(mem, case.user_id)
        vector_keys = [(h.file_path or "", h.chunk_index or 0) for h in hits_of["vector"]]
        out["bm25_unigrams"] = [covered[k] for k in bm25_keys[: dataset.depth]]
        fused = fuse_keys(bm25_keys, vector_keys, dataset.depth)
        out["hybrid_unigrams"] = [covered[k] for k in fused]
    if peer is not None:
        out.update(peer.rankings(q.text, vector, q.as_of, dataset.depth))
    return out


def _variant_search(
    mem: Memstrata,
    user_id: str,
    q: Question,
    vector: np.ndarray,
    v: Variant,
    top_k: int,
    depth: int,
) -> SearchResponse:
    """The production candidates and fusion with the variant's retrievers and decay
    (benchmark-side configuration: the service itself always uses both and its decay)."""
    found = mem.search.candidates(
        user_id, q.text, vector if v.use_vector else None, depth, as_of=q.as_of
    )
    if not v.use_bm25:
        found = replace(found, bm25=[], bm25_scores={})
    hits = rank(
        found,
        top_k=top_k,
        as_of=q.as_of,
        decay=v.decay,
        rrf_k=mem.search.rrf_k,
        pool=mem.search.decay_pool(top_k, v.decay_pool),
        fusion=v.fusion,
    )
    return SearchResponse(q.text, found.mode, hits)


def _unigram_bm25(mem: Memstrata, user_id: str) -> BM25Index[tuple[str, int]]:
    """memstrata's BM25 over the user's stored rows, without character bigrams."""
    index: BM25Index[tuple[str, int]] = BM25Index()
    for key, chunk_text in _stored_texts(mem, user_id).items():
        index.add(key, tokenize(chunk_text, cjk_bigrams=False))
    return index


def _stored_texts(mem: Memstrata, user_id: str) -> dict[tuple[str, int], str]:
    """Every stored row's key (as ``_covered_rows`` keys it) -> its text, in id order."""
    with mem.db.sessions() as session:
        chunks = EmbeddingRepository(session, user_id).load()
    return {(c.file_path or "", c.chunk_index or 0): c.chunk_text for c in chunks}


def _covered_rows(mem: Memstrata, user_id: str) -> dict[tuple[str, int], tuple[str, ...]]:
    """Every stored row's key -> the turn ids it covers (from the search's own index)."""
    model = mem.search.model
    index = mem.search.cache.get(user_id, model)
    with index.lock:
        return {(r.file_path or "", r.chunk_index or 0): r.source_ids for r in index.rows.values()}


def clear_user(mem: Memstrata, user_id: str) -> None:
    """Drop an earlier run's rows as any writer does, so caches and snapshots follow."""
    with transaction(mem.db.sessions) as session:
        repo = EmbeddingRepository(session, user_id)
        repo.lock()
        repo.delete_all()
        repo.bump_generation()
