"""The search part of ``Settings``: chunking, candidates, fusion, time decay, the search
caches and the prompt budget, with the defaults other modules import. ``memstrata.config``
re-exports them and ``Settings`` inherits ``SearchSettings``; import from there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from memstrata.config_bounds import (
    CHUNK_TOKENS_WHY,
    COUNT_WHY,
    MAX_CACHE_BYTES,
    MAX_CHUNK_TOKENS,
    MAX_COUNT,
    MAX_HALF_LIFE_DAYS,
)
from memstrata.retrieval.chunk import CHUNK_TOKENS, CONTEXT_TOKENS, MemoryChunking
from memstrata.retrieval.fusion import HALF_LIFE_DAYS, RRF_K, Fusion

# Share of the model's context the memory part of the system prompt may take (spec: 15 %).
PROMPT_BUDGET_RATIO = 0.15
# Share of that budget each file below the one cut keeps (agent.prompt, "Floors"): 0 is the
# spec's strict priority order. A floor is room the spec gives a higher file; more than
# half the budget would no longer be a floor under it but a reordering.
PROMPT_FLOOR_SHARE = 0.0
MAX_PROMPT_FLOOR_SHARE = 0.5
# Candidates per side: this × top_k (spec: 3) ...
CANDIDATE_MULTIPLIER = 3
# ... and never fewer than this, whatever top_k (docs/BENCHMARKS.md).
MIN_CANDIDATES = 50
# The same while time decay is on: a deeper pool lets decay promote recent rows that
# matched poorly, so a shallower one ranks better there (docs/BENCHMARKS.md).
MIN_CANDIDATES_DECAY = 30
# Query embeddings held by the search's LRU (384-d: ~3.5 KiB each, text and key included;
# bounded in bytes too, by a share of the search cache's budget: retrieval.cache).
QUERY_CACHE_ENTRIES = 1024
# Users whose search index one process holds at most. A backstop: the byte budget binds
# first for any user with a vector row (the smallest such index is charged ~104 KiB at
# 384-d, so 512 MiB holds ~4,900), and 8,192 binds before it only while the average held
# user is charged under 64 KiB — users with no vector row, reloaded in milliseconds, at
# ~2 KiB of RSS when empty (docs/SCALING.md).
SEARCH_CACHE_USERS = 8192
# A user's search index is snapshotted once this many of its conversation rows are not in
# a stored snapshot (retrieval.snapshot; below it a cold load is already fast).
INDEX_SNAPSHOT_MIN_ROWS = 1000
# The upper bounds of the search knobs (memstrata.config_bounds has the shared ones): the
# RRF constant, the candidates per side (a SQL LIMIT and a sort per search), and the rows
# a snapshot waits for.
MAX_RRF_K = 10_000
MAX_CANDIDATE_MULTIPLIER = 100
MAX_CANDIDATES = 10_000
CANDIDATES_WHY = f"at most {MAX_CANDIDATES} (each is read and ranked on every search)"
MAX_SNAPSHOT_ROWS = 10_000_000


class SearchSettings(BaseModel):
    """How memory is cut, searched and cached, and its share of the prompt (the third
    part of ``Settings``)."""

    chunk_tokens: int = Field(
        default=CHUNK_TOKENS,
        ge=16,
        le=MAX_CHUNK_TOKENS,
        description=f"Chunk size in tokens (spec: 512); {CHUNK_TOKENS_WHY}.",
    )
    memory_chunking: MemoryChunking = Field(
        default="paragraphs",
        description="How USER.md and MEMORY.md are cut into chunks: `paragraphs`, the "
        "spec's (split on blank lines, small paragraphs merged up to chunk_tokens), or "
        "`entries`, an opt-in departure from the spec: one chunk per entry (a top-level "
        "list item or a paragraph, a heading kept with the entry after it). On a "
        "long-lived user's MEMORY.md of 312 dated entries, recall@5 of its facts "
        "(memory files only) is 0.92 with paragraphs and 1.00 with entries, and a write "
        "of that file costs about the same CPU either way (p50 24 against 21 ms): an "
        "entry inserted mid-file moves every later entry's row, written again with the "
        "vector it has (docs/BENCHMARKS.md, 'A long-lived user's MEMORY.md'). A file "
        "is cut anew at its next write, or at once by `memstrata reindex --user USER`.",
    )
    conversation_context_tokens: int = Field(
        default=CONTEXT_TOKENS,
        ge=0,
        le=MAX_CHUNK_TOKENS,
        description="Tokens of the previous round prefixed to each indexed round as context "
        f"(0 = off); {CHUNK_TOKENS_WHY}; see retrieval/rounds.py.",
    )
    rrf_k: int = Field(
        default=RRF_K,
        ge=1,
        le=MAX_RRF_K,
        description=f"RRF constant (spec: 60); at most {MAX_RRF_K} (far past it every rank "
        "scores the same).",
    )
    candidate_multiplier: int = Field(
        default=CANDIDATE_MULTIPLIER,
        ge=1,
        le=MAX_CANDIDATE_MULTIPLIER,
        description="Candidates per side = multiplier × top_k (spec: 3); at most "
        f"{MAX_CANDIDATE_MULTIPLIER}.",
    )
    min_candidates: int = Field(
        default=MIN_CANDIDATES,
        ge=1,
        le=MAX_CANDIDATES,
        description="Candidates per side are max(multiplier × top_k, this) while time decay "
        "is off (MEMSTRATA_DECAY=false), so the first results do not change with top_k "
        f"(chosen by measurement, docs/BENCHMARKS.md); {CANDIDATES_WHY}.",
    )
    min_candidates_decay: int = Field(
        default=MIN_CANDIDATES_DECAY,
        ge=1,
        le=MAX_CANDIDATES,
        description="min_candidates while time decay is on: a deeper pool lets decay lift "
        "recent rows that matched poorly (chosen by measurement, docs/BENCHMARKS.md); "
        f"{CANDIDATES_WHY}.",
    )
    query_cache_entries: int = Field(
        default=QUERY_CACHE_ENTRIES,
        ge=0,
        le=MAX_COUNT,
        description="Query embeddings kept in an LRU keyed by user + model + text (0 = off); "
        f"{COUNT_WHY} (a byte budget bounds it first).",
    )
    decay: bool = Field(
        default=True,
        description="Time decay of conversation rows (the spec's; on by default). Off, "
        "recency does not change scores (min_candidates applies instead of "
        "min_candidates_decay): on LoCoMo's full dev set hybrid recall@10 is 0.711 off "
        "against 0.272 with the spec's 30-day decay, whose questions ask about turns weeks "
        "to months old; decay_floor 0.9 gives 0.713 with recency still counting "
        "(docs/BENCHMARKS.md, 2026-12-06).",
    )
    decay_half_life_days: float = Field(
        default=HALF_LIFE_DAYS,
        gt=0,
        le=MAX_HALF_LIFE_DAYS,
        allow_inf_nan=False,
        description="Time-decay half-life in days (spec: 30); at most "
        f"{MAX_HALF_LIFE_DAYS} (a century is no decay at all: MEMSTRATA_DECAY=false).",
    )
    decay_floor: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="score × (floor + (1 − floor) × 0.5^(age/half_life)); 0 is the spec; "
        "from 0.0 to 1.0.",
    )
    decay_pool: bool = Field(
        default=False,
        description="An opt-in departure from the spec's decay (off = the spec's: every "
        "fused candidate is ranked by RRF × its decay factor). On, decay re-orders only the "
        "relevance pool, the max(multiplier × top_k, min_candidates_decay) most relevant "
        "fused rows by plain RRF, and the other candidates follow them, so a recent row that "
        "matched poorly cannot pass an old answer both lists put first. With the spec's "
        "decay, hybrid recall@10 on the full LoCoMo dev set is 0.320 with the pool against "
        "0.272 without, MADial recall@5 0.169 against 0.142; nothing changes with decay off "
        "(docs/BENCHMARKS.md, 'Decay over every candidate again', 2026-12-06).",
    )
    search_cache_users: int = Field(
        default=SEARCH_CACHE_USERS,
        ge=1,
        le=MAX_COUNT,
        description="Users whose search index is kept in memory (LRU), a backstop to "
        "MEMSTRATA_SEARCH_CACHE_BYTES, which binds first for users with vectors; "
        f"{COUNT_WHY}; see docs/SCALING.md.",
    )
    index_snapshot_min_rows: int = Field(
        default=INDEX_SNAPSHOT_MIN_ROWS,
        ge=0,
        le=MAX_SNAPSHOT_ROWS,
        description="Store a user's conversation rows as one binary search-index snapshot "
        "once this many are not in the stored one, so the next cold load reads one value "
        "instead of every row (0 = off: neither read nor write snapshots, no warming); at "
        f"most {MAX_SNAPSHOT_ROWS} (no user holds more rows). docs/ARCHITECTURE.md.",
    )
    index_snapshot_backfill: bool = Field(
        default=True,
        description="After `memstrata serve` starts, write the index snapshots that "
        "MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS calls for and the database lacks (a database crash "
        "empties them; an upgrade; rows imported elsewhere), as `memstrata snapshots` does: "
        "one user at a time, in a child process at the lowest CPU priority; replicas share "
        "the work (docs/RELIABILITY.md, 'Index snapshots after a crash').",
    )
    index_warm_after_import: bool = Field(
        default=True,
        description="After a batch import that leaves MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS or more "
        "conversation rows outside the user's snapshot, load that user's index in the "
        "background so the first search is a warm one (docs/ARCHITECTURE.md, 'Warming "
        "after an import'; its cost to other users' searches in docs/BENCHMARKS.md).",
    )
    search_cache_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024 * 1024,
        le=MAX_CACHE_BYTES,
        description="Byte budget of the per-process search caches: the per-user indexes, "
        "charged at the resident memory (RSS) measured for them, least recently searched "
        "users evicted above it; 1/64 of it bounds the query-embedding cache; at most "
        f"{MAX_CACHE_BYTES} (1 TiB, past any machine's memory). See docs/SCALING.md for the "
        "measured bytes per 1,000 rows.",
    )
    vector_backend: Literal["memory", "pgvector"] = Field(
        default="memory",
        description="Where vector candidates come from: the per-user in-memory index (exact "
        "cosine over vectors loaded from pgvector) or a pgvector query per search.",
    )
    search_fusion: Fusion = Field(
        default="rrf",
        description="How the BM25 and vector candidates are combined: `rrf`, the spec's "
        "reciprocal rank fusion (k = MEMSTRATA_RRF_K), or `convex`, an opt-in departure "
        "from the spec: 0.5 × min-max(BM25) + 0.5 × min-max(cosine) over the same "
        "candidates (RRF still when a side gives ranks only). Convex ranked better on "
        "LoCoMo and MADial; its first results move with top_k above 10 (docs/BENCHMARKS.md, "
        "'Score fusion (opt-in)').",
    )
    prompt_budget_ratio: float = Field(
        default=PROMPT_BUDGET_RATIO,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Share of token_limit for memory (spec: 15%), above 0 and at most 1.",
    )
    prompt_floor_share: float = Field(
        default=PROMPT_FLOOR_SHARE,
        ge=0,
        le=MAX_PROMPT_FLOOR_SHARE,
        allow_inf_nan=False,
        description="An opt-in departure from the spec's priority order, 0 to 0.5 (0 = off, "
        "the spec's: a file below the one cut is left out and named). Above 0, each memory "
        "file below the one cut keeps up to this share of the prompt's budget, taken from "
        "the file cut (never from AGENTS.md; none below 150 tokens): whole if smaller, else "
        "cut by its own rule. 0.125 is the value measured: at token_limit 32,000, a USER.md "
        "of 8,924 tokens shows 3,421 instead of 3,971 and a MEMORY.md of 300 entries its 16 "
        "newest (579 tokens) instead of being left out (docs/ARCHITECTURE.md, 'Floors').",
    )
