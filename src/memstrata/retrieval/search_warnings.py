"""What a search tells its caller about a side that could not take part: the words for a
failed query embedding (``query_failure``) and the warnings of a side left out
(``side_warnings``). The cause of a failure goes to the log; these words go to the person
or agent who searched, so they never name the embedding API's address."""

from __future__ import annotations

from memstrata.errors import EmbeddingRejectedError
from memstrata.retrieval.embedding_failures import ServerStoppingError
from memstrata.retrieval.embeddings import (
    CircuitOpenError,
    EmbeddingLengthError,
    EmbeddingOutageError,
)


def query_failure(exc: Exception) -> str:
    """Why the query embedding failed, in words for the person or agent who searched (the
    exception's name meant nothing to them; its text, naming the API's address, goes to
    the log only)."""
    if isinstance(exc, CircuitOpenError):
        if isinstance(exc.last_failure, EmbeddingLengthError):
            return f"{OTHER_LENGTH_ANSWER} and is not asked again for a moment"
        return "the embedding service failed repeatedly and is not asked again for a moment"
    if isinstance(exc, EmbeddingLengthError):
        return OTHER_LENGTH_ANSWER
    if isinstance(exc, ServerStoppingError):  # a long query, during a shutdown
        return "this memory server is stopping and embeds no long query now"
    if isinstance(exc, EmbeddingOutageError):
        return "the embedding service is unreachable or did not answer in time"
    if isinstance(exc, EmbeddingRejectedError):
        return "the embedding service refused the query"
    return "the embedding service gave an unusable answer"


OTHER_LENGTH_ANSWER = (
    "the embedding service answered with vectors of another length than the embedding "
    "model's (a configuration or model change)"
)
NO_EMBEDDING_API = "no embedding API is configured: searched with BM25 only"
NO_VECTORS_YET = (
    "none of this user's rows has a vector of the embedding model yet (they are embedded "
    "in the background): searched with BM25 only"
)
OTHER_LENGTH = (
    "the embedding model's vectors changed length and none of this user's stored vectors "
    "has the new length yet (they are embedded again in the background): searched with "
    "BM25 only"
)
# A new user's files are still their templates (not indexed) and nothing else was written:
# without a word, "bm25" read like an embedding outage to anyone watching ``mode``.
NOTHING_INDEXED = (
    "nothing of this user's is indexed yet (no conversation, notes or own text in USER.md "
    "or MEMORY.md): there is nothing to search"
)
# More than 1 row in this many without a vector is worth a word on every search: a row the
# worker has not reached yet is a busy server's normal state, a large share is an embedding
# model change or an outage's backlog, and those rows are found by their words only.
UNEMBEDDED_ONE_IN = 20


def unembedded_rows(missing: int, rows: int) -> str:
    """The warning of a hybrid search over a user whose rows are partly without a vector."""
    have = "has" if missing == 1 else "have"
    return (
        f"{missing} of this user's {rows} rows {have} no vector of the embedding model yet "
        "(they are embedded in the background): those are found by their words only"
    )


NO_SEARCHABLE_WORDS = (
    "the query has no searchable words (only common words, punctuation or symbols), so "
    "keyword search matched nothing"
)


def side_warnings(
    *,
    embedder: bool,
    query_embedded: bool,
    vectors: bool,
    rows: int,
    terms: bool,
    other_length: bool = False,
    unembedded: int = 0,
) -> list[str]:
    """What the caller should know about a side of the search that could not take part.
    A failed query embedding is reported where it happens (``SearchService.search``).
    ``other_length``: the user's vectors have another length than the query's;
    ``unembedded``: how many of the user's rows have no vector of the model."""
    warnings = [] if rows else [NOTHING_INDEXED]
    if not embedder:
        warnings.append(NO_EMBEDDING_API)
    elif query_embedded and other_length:
        warnings.append(OTHER_LENGTH)
    elif query_embedded and not vectors and rows:
        warnings.append(NO_VECTORS_YET)
    elif query_embedded and vectors and unembedded * UNEMBEDDED_ONE_IN > rows:
        warnings.append(unembedded_rows(unembedded, rows))
    if not terms:
        hybrid = query_embedded and vectors
        warnings.append(NO_SEARCHABLE_WORDS + ("; results are by meaning only" if hybrid else ""))
    return warnings
