from __future__ import annotations

import math
import random
from itertools import pairwise

import bm25s
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.retrieval.bm25 import bm25_scores
from memstrata.retrieval.bm25_index import BM25Index
from memstrata.retrieval.tokenize import tokenize

# N = 4, avgdl = (3 + 3 + 2 + 0) / 4 = 2.
CORPUS = [["a", "b", "c"], ["a", "a", "d"], ["e", "f"], []]

# Hand-computed with k1 = 1.2, b = 0.75:
#   "a": df = 2, idf = ln(1 + 2.5 / 2.5) = ln 2; docs 0 and 1 have |d| = 3, so
#        k1 * (1 - b + b * 3 / 2) = 1.65.
#        doc 0: tf 1 -> ln 2 * 1 * 2.2 / (1 + 1.65) ; doc 1: tf 2 -> ln 2 * 2 * 2.2 / (2 + 1.65)
#   "e": df = 1, idf = ln(1 + 3.5 / 1.5) = ln(10 / 3); doc 2 has |d| = avgdl, so
#        tf 1 -> ln(10 / 3) * 2.2 / (1 + 1.2) = ln(10 / 3)
A_DOC0 = math.log(2) * 2.2 / 2.65  # 0.5754429...
A_DOC1 = math.log(2) * 4.4 / 3.65  # 0.8355747...
E_DOC2 = math.log(10 / 3)  # 1.2039728...


class TestReferenceScores:
    def test_hand_computed_values(self) -> None:
        assert (round(A_DOC0, 7), round(A_DOC1, 7), round(E_DOC2, 7)) == (
            0.5754429,
            0.8355747,
            1.2039728,
        )
        assert bm25_scores(["a"], CORPUS) == pytest.approx([A_DOC0, A_DOC1, 0, 0], abs=1e-12)
        assert bm25_scores(["e", "zzz"], CORPUS) == pytest.approx([0, 0, E_DOC2, 0], abs=1e-12)

    def test_query_terms_add_up(self) -> None:
        assert bm25_scores(["a", "e"], CORPUS) == pytest.approx(
            [A_DOC0, A_DOC1, E_DOC2, 0], abs=1e-12
        )

    def test_repeated_query_token_counts_each_time_like_bm25s(self) -> None:
        assert bm25_scores(["a", "a"], CORPUS) == pytest.approx(
            [2 * A_DOC0, 2 * A_DOC1, 0, 0], abs=1e-12
        )

    def test_idf_stays_positive_for_a_term_in_every_document(self) -> None:
        # df = N = 2: idf = ln(1 + 0.5 / 2.5) = ln 1.2; both docs have |d| = avgdl.
        assert bm25_scores(["x"], [["x"], ["x"]]) == pytest.approx([math.log(1.2)] * 2)

    def test_degenerate_corpora(self) -> None:
        assert bm25_scores(["a"], []) == []
        assert bm25_scores(["a"], [[], []]) == [0.0, 0.0]
        assert bm25_scores([], CORPUS) == [0.0, 0.0, 0.0, 0.0]


class TestIndex:
    @staticmethod
    def build(corpus: list[list[str]]) -> BM25Index[str]:
        index: BM25Index[str] = BM25Index()
        for i, tokens in enumerate(corpus):
            index.add(f"d{i}", tokens)
        return index

    def test_hand_computed_values_best_first(self) -> None:
        index = self.build(CORPUS)
        ranked = index.top_n(["a"], 10)
        assert [key for key, _ in ranked] == ["d1", "d0"]
        assert [score for _, score in ranked] == pytest.approx([A_DOC1, A_DOC0], abs=1e-12)
        ranked = index.top_n(["a", "e"], 2)
        assert [key for key, _ in ranked] == ["d2", "d1"]
        assert [score for _, score in ranked] == pytest.approx([E_DOC2, A_DOC1], abs=1e-12)

    def test_only_positive_scores_are_returned(self) -> None:
        index = self.build(CORPUS)
        assert index.top_n(["zzz"], 10) == []
        assert index.top_n([], 10) == []
        assert index.top_n(["a"], 0) == []

    def test_len_and_contains(self) -> None:
        index = self.build(CORPUS)
        assert len(index) == 4
        assert "d3" in index
        assert "d4" not in index
        index.remove("d3")
        assert len(index) == 3
        assert "d3" not in index

    def test_removing_an_unknown_key_raises(self) -> None:
        index = self.build(CORPUS)
        with pytest.raises(KeyError):
            index.remove("nope")

    def test_removal_rescores_over_live_documents(self) -> None:
        index = self.build(CORPUS)
        index.remove("d3")  # N = 3, avgdl = 8 / 3: every remaining score changes
        expected = bm25_scores(["a", "e"], CORPUS[:3])
        assert dict(index.top_n(["a", "e"], 10)) == pytest.approx(
            {"d0": expected[0], "d1": expected[1], "d2": expected[2]}, abs=1e-12
        )
        assert expected[0] != pytest.approx(A_DOC0)

    def test_equal_scores_go_by_key_not_insertion_order(self) -> None:
        index: BM25Index[int] = BM25Index()
        for key in [5, 3, 9, 1]:
            index.add(key, ["same", "words"])
        assert [key for key, _ in index.top_n(["same"], 10)] == [1, 3, 5, 9]
        assert [key for key, _ in index.top_n(["same"], 2)] == [1, 3]

    def test_re_adding_a_key_replaces_it(self) -> None:
        index: BM25Index[int] = BM25Index()
        for key in [1, 2, 3]:
            index.add(key, ["x", "y"])
        index.add(1, ["y", "x"])  # a new slot, last: equal scores still go by key
        assert len(index) == 3
        assert [key for key, _ in index.top_n(["x"], 10)] == [1, 2, 3]
        index.add(2, ["z", "z"])
        assert [key for key, _ in index.top_n(["x"], 10)] == [1, 3]

    def test_term_only_in_a_removed_document_no_longer_matches(self) -> None:
        index = self.build(CORPUS)
        index.remove("d2")
        assert index.top_n(["e"], 10) == []
        index.add("d2", ["e"])
        assert [key for key, _ in index.top_n(["e"], 10)] == ["d2"]

    def test_compaction_keeps_scores_and_order(self) -> None:
        rng = random.Random(7)
        docs = {i: rng.choices("abcdefgh", k=rng.randint(1, 8)) for i in range(700)}
        index: BM25Index[int] = BM25Index()
        for key, tokens in docs.items():
            index.add(key, tokens)
        for key in range(600):
            if key % 5:
                index.remove(key)
                del docs[key]
        # White-box: the 480 removals must have triggered at least one compaction.
        assert index._dead < 480
        assert len(index) == len(docs) == 220
        live = list(docs)
        expected = bm25_scores(["a", "c", "h"], [docs[key] for key in live])
        got = dict(index.top_n(["a", "c", "h"], 1000))
        assert got == pytest.approx(
            {k: s for k, s in zip(live, expected, strict=True) if s > 0}, abs=1e-12
        )
        # Identical documents still come back by key after renumbering.
        index.add(10_000, ["q"])
        index.add(-1, ["q"])
        assert [key for key, _ in index.top_n(["q"], 5)] == [-1, 10_000]


def mixed_corpus(rng: random.Random, n_docs: int) -> list[list[str]]:
    """Conversational-looking snippets, mixing Chinese and English, through tokenize."""
    english = [
        "memory",
        "user",
        "likes",
        "coffee",
        "tea",
        "project",
        "deadline",
        "meeting",
        "cat",
        "dog",
    ]
    chinese = list("我喜欢喝咖啡茶项目会议猫狗今天明天工作学习记忆")
    docs = []
    for _ in range(n_docs):
        parts = [rng.choice(english) if rng.random() < 0.5 else rng.choice(chinese)]
        parts += [rng.choice(english + chinese) for _ in range(rng.randint(0, 30))]
        docs.append(tokenize(" ".join(parts)))
    return docs


QUERIES = [
    "coffee 咖啡",
    "我喜欢喝茶",
    "project deadline meeting",
    "猫 cat dog 狗 狗",
    "unknown 无",
]


def oracle_scores(query: list[str], docs: list[list[str]]) -> np.ndarray:
    """bm25s "lucene" in float64; it omits BM25's constant (k1 + 1) factor, so add it back."""
    oracle = bm25s.BM25(method="lucene", k1=1.2, b=0.75, dtype="float64")
    oracle.index(docs, show_progress=False)
    return np.asarray(oracle.get_scores(query)) * 2.2


def assert_matches_oracle(index: BM25Index[int], live: dict[int, list[str]]) -> None:
    keys = list(live)
    for text in QUERIES:
        query = tokenize(text)
        expected = oracle_scores(query, [live[key] for key in keys])
        got = dict(index.top_n(query, len(index)))
        assert [got.get(key, 0.0) for key in keys] == pytest.approx(expected, abs=1e-6)
        assert bm25_scores(query, [live[key] for key in keys]) == pytest.approx(expected, abs=1e-6)


def test_posting_count_is_term_doc_pairs() -> None:
    index: BM25Index[str] = BM25Index()
    assert index.posting_count() == 0
    index.add("a", ["tea", "tea", "kite"])  # two distinct terms
    index.add("b", ["tea"])
    assert index.posting_count() == 3


def test_many_documents_without_terms_add_in_bulk() -> None:
    """``add_many`` of 64+ documents none of which has a term (emoji-only notes) raised
    IndexError on an index that already had postings."""
    for seeded in (False, True):
        index: BM25Index[int] = BM25Index()
        if seeded:
            index.add(1, ["tea", "kite"])
        index.add_many([(k, []) for k in range(10, 90)])
        index.add_many([(k, ["kite"] if k % 2 else []) for k in range(100, 180)])
        assert len(index) == 160 + seeded
        found = index.top_n(["kite"], 200)
        assert len(found) == 40 + seeded and all(score > 0 for _, score in found)


def _recounted_pairs(index: BM25Index[int]) -> int:
    """The pairs the index holds, summed from its postings (the kept count must agree)."""
    frozen = index._frozen.pairs if index._frozen is not None else 0
    return frozen + sum(len(entry.slots) for entry in index._postings.values())


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "add_many", "remove"]),
            st.lists(st.sampled_from(["tea", "kite", "owl", "茶", "lamp"]), max_size=6),
        ),
        max_size=40,
    )
)
def test_the_kept_posting_count_equals_a_recount(steps: list[tuple[str, list[str]]]) -> None:
    bulk: BM25Index[int] = BM25Index()
    bulk.add_many([(k, ["tea", "owl"][: k % 3] * (k % 2 + 1)) for k in range(80)])  # frozen
    indexes = [bulk, BM25Index.from_arrays(bulk.to_arrays()), BM25Index[int]()]
    for index in indexes:
        next_key = 1000
        for n, (op, tokens) in enumerate(steps):
            live = sorted(index._slot_of)
            if op == "remove" and live:
                for key in live[n % len(live) :: 7][:40]:  # enough to compact at times
                    index.remove(key)
            elif op == "add_many":
                index.add_many([(next_key + i, tokens[i:]) for i in range(70)])
                next_key += 70
            else:
                index.add(next_key, tokens)
                next_key += 1
            assert index.posting_count() == _recounted_pairs(index)


class TestAgainstBm25s:
    def test_every_score_matches(self) -> None:
        rng = random.Random(42)
        live = dict(enumerate(mixed_corpus(rng, 200)))
        live[200] = []  # an empty chunk still counts towards N and avgdl
        index: BM25Index[int] = BM25Index()
        for key, tokens in live.items():
            index.add(key, tokens)
        assert_matches_oracle(index, live)

    def test_every_score_matches_after_adds_and_removals(self) -> None:
        rng = random.Random(1)
        live: dict[int, list[str]] = {}
        index: BM25Index[int] = BM25Index()
        next_key = 0
        for round_ in range(4):
            for tokens in mixed_corpus(rng, 120):
                index.add(next_key, tokens)
                live[next_key] = tokens
                next_key += 1
            for key in rng.sample(sorted(live), 90 if round_ < 3 else 200):
                index.remove(key)
                del live[key]
            assert len(index) == len(live)
            assert_matches_oracle(index, live)


@settings(max_examples=150)
@given(
    st.lists(st.lists(st.sampled_from("abcde"), max_size=6), min_size=1, max_size=25),
    st.lists(st.integers(min_value=0, max_value=24), max_size=10),
    st.lists(st.sampled_from("abcdez"), max_size=4),
)
def test_index_equals_reference_after_any_removals(
    docs: list[list[str]], removals: list[int], query: list[str]
) -> None:
    index: BM25Index[int] = BM25Index()
    for key, tokens in enumerate(docs):
        index.add(key, tokens)
    for key in dict.fromkeys(removals):
        if key in index:
            index.remove(key)
    live = [key for key in range(len(docs)) if key in index]
    expected = bm25_scores(query, [docs[key] for key in live])
    got = index.top_n(query, len(docs))
    assert dict(got) == pytest.approx(
        {key: score for key, score in zip(live, expected, strict=True) if score > 0}, abs=1e-12
    )
    # Best first; exactly equal scores in insertion (here: key) order.
    assert all(a[1] > b[1] or (a[1] == b[1] and a[0] < b[0]) for a, b in pairwise(got))


def test_add_many_equals_adding_one_by_one() -> None:
    import random

    rng = random.Random(3)
    words = [f"w{i}" for i in range(40)] + ["乌", "龙", "茶"]
    docs = [(i, [rng.choice(words) for _ in range(rng.randint(0, 12))]) for i in range(300)]
    one: BM25Index[int] = BM25Index()
    many: BM25Index[int] = BM25Index()
    for key, tokens in docs[:50]:
        one.add(key, tokens)
        many.add(key, tokens)
    for key, tokens in docs[50:]:
        one.add(key, tokens)
    many.add_many(docs[50:])
    for key in (3, 77, 150):  # removal still undoes df exactly
        one.remove(key)
        many.remove(key)
    one.add_many([(77, ["w1", "w1"])] * 1)
    many.add(77, ["w1", "w1"])
    for query in (["w1"], ["w2", "w3", "w3"], ["乌", "茶"], ["nothing"]):
        got, want = many.top_n(query, 20), one.top_n(query, 20)
        assert [k for k, _ in got] == [k for k, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want])
    assert len(many) == len(one)


def test_a_bulk_loaded_index_stays_exact_through_adds_removals_and_compaction() -> None:
    """add_many on an empty index keeps its postings as arrays (``_Frozen``); every later
    change must score exactly like an index built one document at a time."""
    rng = random.Random(9)
    words = [f"w{i}" for i in range(60)] + ["乌", "龙", "茶"]
    docs = {i: [rng.choice(words) for _ in range(rng.randint(0, 10))] for i in range(600)}
    bulk: BM25Index[int] = BM25Index()
    bulk.add_many(list(docs.items()))
    one: BM25Index[int] = BM25Index()
    for key, tokens in docs.items():
        one.add(key, tokens)
    assert (bulk.posting_count(), bulk.term_count()) == (one.posting_count(), one.term_count())
    live = dict(docs)
    next_key = 600
    for step in range(5):
        for key in rng.sample(sorted(live), 130):  # > 256 dead in all: compaction runs
            bulk.remove(key)
            one.remove(key)
            del live[key]
        for _ in range(20):
            tokens = [rng.choice(words) for _ in range(rng.randint(1, 6))]
            bulk.add(next_key, tokens)
            one.add(next_key, tokens)
            live[next_key] = tokens
            next_key += 1
        for query in (["w1"], ["w2", "w3", "w3"], ["乌", "茶"], [words[step]], ["absent"]):
            keys = sorted(live)
            expected = bm25_scores(query, [live[k] for k in keys])
            got = dict(bulk.top_n(query, len(live)))
            assert got == pytest.approx(
                {k: v for k, v in zip(keys, expected, strict=True) if v > 0}, abs=1e-9
            )
            assert bulk.top_n(query, 10) == one.top_n(query, 10)
        assert bulk.term_count() == one.term_count()
