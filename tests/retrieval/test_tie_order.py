"""Equal scores are settled by row id on both sides of the search, so the answer depends on
the rows and the query alone: not on the order rows were loaded in (a replica seeded from
a snapshot holds them in another order than one loaded from the rows), not on where a row
sits in the vector matrix (BLAS rounds by position), not on the CPU.

Repeated texts are where ties come from (the same short turn, the same vector), so the
data here repeats a few vectors and texts many times. No embedder: the vectors only need
to repeat, not to mean anything; the database only for the pgvector backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pytest

from memstrata.db.database import Database
from memstrata.retrieval import snapshot
from memstrata.retrieval.bm25_index import BM25Index
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import EmbeddingKind
from memstrata.retrieval.records import IndexState, NewChunk, StoredChunk
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.staging import content_hash
from memstrata.retrieval.terms import encode_terms
from memstrata.retrieval.topn import K, best_first
from memstrata.retrieval.user_index import UserIndex
from memstrata.retrieval.vector_index import VectorIndex, exact_scores

from .stored import insert_rows

DIM = 384
PHRASES = ["ok thanks", "see you tomorrow", "sounds good to me", "ok", "thanks a lot"]


def vector_of(text: str) -> npt.NDArray[np.float32]:
    """A fixed vector per text, as an embedder gives (not unit length, like most APIs)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32) * 3.0


def reference(scores: dict[int, float], n: int) -> list[int]:
    return sorted(scores, key=lambda k: (-scores[k], k))[:n]


def repeated_vectors(rng: np.random.Generator, rows: int) -> dict[int, npt.NDArray[np.float32]]:
    """Row id → vector; a third of the rows share one of five vectors."""
    shared = [vector_of(p) for p in PHRASES]
    return {
        int(key): shared[int(rng.integers(len(shared)))]
        if rng.random() < 0.34
        else rng.standard_normal(DIM).astype(np.float32)
        for key in rng.choice(10 * rows, size=rows, replace=False)
    }


def exact_of(
    index: VectorIndex, keys: list[int], query: npt.NDArray[np.float32]
) -> dict[int, float]:
    """Each row's score computed on its own, from its unit vector and the unit query."""
    one = VectorIndex(len(query))
    one.add(0, query)
    scores = exact_scores(index.unit_rows(keys), one.unit_rows([0])[0])
    return dict(zip(keys, scores.tolist(), strict=True))


# -- the rule ---------------------------------------------------------------------------------


def lookup(keys: list[K]) -> Callable[[npt.NDArray[np.intp]], list[K]]:
    return lambda positions: [keys[p] for p in positions.tolist()]


def test_best_first_keeps_every_tie_at_the_cut_and_orders_ties_by_key() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.7, 0.5, -np.inf, 0.5])
    keys = lookup([40, 10, 30, 20, 5, 1, 35])
    assert best_first(scores, 4, keys) == [(10, 0.9), (20, 0.7), (5, 0.5), (30, 0.5)]
    assert [k for k, _ in best_first(scores, 10, keys)] == [10, 20, 5, 30, 35, 40]
    assert best_first(scores, 0, keys) == []
    assert best_first(np.array([-np.inf, -np.inf]), 1, keys) == []
    assert best_first(np.array([0.1, 0.3, 0.2]), 2, keys) == [(10, 0.3), (30, 0.2)]


def test_best_first_orders_any_sortable_key() -> None:
    scores = np.array([1.0, 2.0, 1.0, 1.0])
    keys = lookup([("b.md", 0), ("a.md", 3), ("a.md", 2), ("a.md", 10)])
    assert [k for k, _ in best_first(scores, 3, keys)] == [("a.md", 3), ("a.md", 2), ("a.md", 10)]


# -- vectors ------------------------------------------------------------------------------------


def test_copies_of_a_vector_score_the_same_wherever_they_sit() -> None:
    """BLAS's matmul rounds a row by its position and the matrix's size: the same vector
    scored a few ulps apart in one matrix, and differently in a smaller one."""
    rng = np.random.default_rng(11)
    for trial in range(20):
        rows = int(rng.integers(500, 4000))
        copies = {int(k) for k in rng.choice(rows, size=40, replace=False)}
        twin = rng.standard_normal(DIM).astype(np.float32)
        index = VectorIndex(DIM)
        index.add_many(
            list(range(rows)),
            [
                twin if k in copies else rng.standard_normal(DIM).astype(np.float32)
                for k in range(rows)
            ],
        )
        alone = VectorIndex(DIM)
        alone.add(0, twin)
        query = rng.standard_normal(DIM).astype(np.float32)
        scores = dict(index.top_n(query, rows))
        assert {scores[k] for k in copies} == {alone.top_n(query, 1)[0][1]}, trial


def test_one_row_and_many_rows_are_made_unit_length_alike() -> None:
    rng = np.random.default_rng(0)
    vectors = [rng.standard_normal(DIM).astype(np.float32) for _ in range(100)]
    one_by_one, in_bulk = VectorIndex(DIM), VectorIndex(DIM)
    for key, v in enumerate(vectors):
        one_by_one.add(key, v)
    in_bulk.add_many(list(range(100)), vectors)
    keys = list(range(100))
    assert np.array_equal(one_by_one.unit_rows(keys), in_bulk.unit_rows(keys))


def test_vector_ties_at_the_cut_go_by_row_id_whatever_the_load_order() -> None:
    rng = np.random.default_rng(3)
    vectors = repeated_vectors(rng, 1500)
    keys = list(vectors)
    shuffled = [keys[i] for i in rng.permutation(len(keys))]
    by_id, by_shuffle, one_by_one = VectorIndex(DIM), VectorIndex(DIM), VectorIndex(DIM)
    by_id.add_many(sorted(keys), [vectors[k] for k in sorted(keys)])
    by_shuffle.add_many(shuffled, [vectors[k] for k in shuffled])
    for key in reversed(keys):
        one_by_one.add(key, vectors[key])
    seeded = VectorIndex.from_unit_rows(shuffled, by_shuffle.unit_rows(shuffled))
    queries = [vector_of(p) for p in PHRASES] + [rng.standard_normal(DIM).astype(np.float32)]
    for query in queries:
        exact = exact_of(by_id, sorted(keys), query)
        for n in (1, 10, 30, 200, 600):
            want = reference(exact, n)
            for index in (by_id, by_shuffle, one_by_one, seeded):
                assert [k for k, _ in index.top_n(query, n)] == want, n


def test_vector_top_n_is_the_exact_ranking_with_removals_and_a_filter() -> None:
    """The matmul only preselects: the answer is what ranking every row exactly gives."""
    rng = np.random.default_rng(5)
    vectors = repeated_vectors(rng, 2000)
    keys = list(vectors)
    index = VectorIndex(DIM)
    index.add_many(keys, [vectors[k] for k in keys])
    for key in keys[::7]:
        index.remove(key)
    live = [k for k in keys if k in index]
    allowed = set(live[::2])
    for query in [vector_of("ok"), rng.standard_normal(DIM).astype(np.float32)]:
        exact = exact_of(index, live, query)
        for n in (5, 30, 100):
            assert index.top_n(query, n) == [(k, exact[k]) for k in reference(exact, n)]
            within = {k: s for k, s in exact.items() if k in allowed}
            assert [k for k, _ in index.top_n(query, n, allowed)] == reference(within, n)


# -- BM25 ---------------------------------------------------------------------------------------


def test_bm25_ties_at_the_cut_go_by_row_id_whatever_the_load_order() -> None:
    rng = np.random.default_rng(8)
    words = [f"w{i}" for i in range(30)]
    docs: dict[int, list[str]] = {}
    for key in rng.choice(50_000, size=1200, replace=False):
        if rng.random() < 0.4:  # a repeated short turn
            docs[int(key)] = PHRASES[int(rng.integers(len(PHRASES)))].split()
        else:
            docs[int(key)] = [words[j] for j in rng.integers(0, len(words), 8)]
    keys = list(docs)
    bulk: BM25Index[int] = BM25Index()
    bulk.add_many([(k, docs[k]) for k in sorted(keys)])
    one_by_one: BM25Index[int] = BM25Index()
    for key in reversed(keys):
        one_by_one.add(key, docs[key])
    seeded = BM25Index.from_arrays(bulk.to_arrays())
    shuffled: BM25Index[int] = BM25Index()
    shuffled.add_many([(k, docs[k]) for k in (keys[i] for i in rng.permutation(len(keys)))])
    for query in (["ok"], ["thanks"], ["ok", "thanks"], ["w1"], ["w2", "see"]):
        scores = dict(bulk.top_n(query, len(keys)))
        for n in (1, 10, 30, 200):
            want = reference(scores, n)
            for index in (bulk, one_by_one, seeded, shuffled):
                assert [k for k, _ in index.top_n(query, n)] == want, (query, n)


# -- two replicas of one user ------------------------------------------------------------------


def test_a_replica_seeded_from_a_snapshot_answers_like_one_loaded_from_rows() -> None:
    """Replica A loads every row in id order; replica B is seeded from A's snapshot (the
    conversation rows) and then reads the memory file rows, which come after them in its
    index though their ids are smaller; C loaded the rows newest first."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rng = np.random.default_rng(2)
    rows = []
    for i in range(1, 400):
        path = "MEMORY.md" if i % 25 == 0 else f"sessions/s/{i}"
        text = PHRASES[i % len(PHRASES)] if i % 3 else f"turn {i} about w{int(rng.integers(50))}"
        vec = vector_of(text)
        rows.append(
            StoredChunk(i, path, 0, text, at, "h", "m", DIM, (), vec, None, encode_terms(text))
        )
    a = UserIndex("u", "m")
    a.state = IndexState(1, 0, 0)
    a.apply(rows, [])
    taken = a.export()
    assert taken is not None
    payload = snapshot.encode(taken.rows, taken.terms, taken.vector_ids, taken.vectors)
    b = UserIndex("u", "m")
    b.seed(snapshot.decode(payload, taken.max_id))
    b.apply([r for r in rows if r.file_path == "MEMORY.md"], [])
    c = UserIndex("u", "m")
    c.apply(list(reversed(rows)), [])
    for phrase in PHRASES:
        for n in (1, 5, 30):
            terms = phrase.split()
            want_bm25 = a.bm25.top_n(terms, n)
            assert a.vectors is not None and b.vectors is not None and c.vectors is not None
            want_vectors = a.vectors.top_n(vector_of(phrase), n)
            for replica in (b, c):
                assert replica.bm25.top_n(terms, n) == want_bm25
                assert replica.vectors is not None
                assert replica.vectors.top_n(vector_of(phrase), n) == want_vectors


@pytest.mark.parametrize("n", [1, 3])
def test_identical_rows_come_back_lowest_id_first(n: int) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    text = "we adopted a dog named rex"
    rows = [
        StoredChunk(i, f"sessions/s/{i}", 0, text, at, "h", "m", DIM, (), vector_of(text), None)
        for i in (7, 3, 9, 5)
    ]
    index = UserIndex("u", "m")
    index.apply(rows, [])
    assert index.vectors is not None
    assert [k for k, _ in index.bm25.top_n(["dog"], n)] == [3, 5, 7][:n]
    assert [k for k, _ in index.vectors.top_n(vector_of(text), n)] == [3, 5, 7][:n]


# -- the pgvector backend ----------------------------------------------------------------------


class QueryVectorsOnly:
    """Names the model the rows' vectors are stored under; the test passes query vectors."""

    name = "test-ties-384"

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        raise AssertionError("query vectors are passed in")


def test_pgvector_settles_ties_like_the_index_in_memory(db: Database) -> None:
    """pgvector orders by (distance, id); the index in memory by (score desc, id): with
    many copies of a few vectors the two still name the same rows in the same order."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rng = np.random.default_rng(4)
    chunks = []
    for i in range(300):
        text = PHRASES[i % len(PHRASES)] if i % 2 else f"turn {i}"
        vector = vector_of(text) if i % 2 else rng.standard_normal(DIM).astype(np.float32)
        chunks.append(
            NewChunk(
                f"sessions/s/{i}",
                0,
                text,
                content_hash(text),
                start,
                vector.tolist(),
                QueryVectorsOnly.name,
                [f"s:{i}"],
            )
        )
    insert_rows(db, "ties", list(reversed(chunks)))  # ids in another order than the turns
    memory = SearchService(IndexCache(db.sessions), QueryVectorsOnly())
    pg = SearchService(IndexCache(db.sessions), QueryVectorsOnly(), vector_backend="pgvector")
    for query in [vector_of(p) for p in PHRASES] + [rng.standard_normal(DIM).astype(np.float32)]:
        for n in (1, 20, 45):
            a = memory.candidates("ties", "", query, n).vector
            b = pg.candidates("ties", "", query, n).vector
            assert a == b, n


def test_pgvector_leaves_out_zero_vectors_like_the_index_in_memory(db: Database) -> None:
    """A zero vector's cosine distance is NaN in pgvector, sorted last: a list longer than
    the real vectors used to end with it."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    vectors = {"a dog": vector_of("a dog"), "nothing": np.zeros(DIM, dtype=np.float32)}
    insert_rows(
        db,
        "zero",
        [
            NewChunk(f"sessions/s/{i}", 0, t, content_hash(t), start, v.tolist(),
                     QueryVectorsOnly.name, [f"s:{i}"])
            for i, (t, v) in enumerate(vectors.items())
        ],
    )  # fmt: skip
    memory = SearchService(IndexCache(db.sessions), QueryVectorsOnly())
    pg = SearchService(IndexCache(db.sessions), QueryVectorsOnly(), vector_backend="pgvector")
    query = vector_of("a dog")
    a = memory.candidates("zero", "", query, 10).vector
    b = pg.candidates("zero", "", query, 10).vector
    assert len(a) == 1 and a == b
