"""What a search accepts: the checks of its arguments, each with the message a caller gets
(an ``InvalidContentError``; 422 over HTTP). The bounds are in ``retrieval.limits``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from memstrata.errors import InvalidContentError
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.limits import MAX_QUERY_CHARS, MAX_TOP_K, SOURCES
from memstrata.retrieval.rounds import (
    MAX_FUTURE_SKEW,
    aware,
    early_error,
    future_error,
    in_utc_range,
)
from memstrata.text import unstorable_text


def check_as_of(as_of: object, now: datetime | None = None) -> datetime | None:
    """``as_of`` made timezone-aware (UTC when naive); refused, as a turn's timestamp is,
    before the Unix epoch (one rule, ``rounds.early_error``) or later than now +
    ``MAX_FUTURE_SKEW``: every dated row would be searched as if centuries old, its decay
    and so its score 0, the ranking gone without a word."""
    if as_of is None:
        return None
    if not isinstance(as_of, datetime):
        raise InvalidContentError("as_of must be a datetime (ISO 8601 over HTTP)", field="as_of")
    when = aware(as_of)
    early_error("as_of", when, "no turn is dated before the Unix epoch; give a later as_of")
    current = now or datetime.now(UTC)
    if not in_utc_range(when) or when > current + MAX_FUTURE_SKEW:
        raise future_error("as_of", as_of, current, "leave as_of out to search as of now")
    return when


def check_query(query: object) -> str:
    """The one rule for a search's query, whoever searches: HTTP, the library, the CLI and
    the ``memory_search`` tool (in process and over MCP). A NUL is refused as stored text
    refuses it: no stored text holds one, so a query with one could never match; a lone
    surrogate, the embedding request cannot carry."""
    if not isinstance(query, str):
        raise InvalidContentError(
            f"query must be a string, got {type(query).__name__}", field="query"
        )
    if not query.strip():
        raise InvalidContentError("query is blank: send the words to search for", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidContentError(
            f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}", field="query"
        )
    if (problem := unstorable_text(query, "query")) is not None:
        raise InvalidContentError(problem, field="query")
    return query


def check_top_k(top_k: object) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidContentError(f"top_k must be an integer from 1 to {MAX_TOP_K}", field="top_k")
    return top_k


def check_sources(sources: Sequence[str] | None) -> list[str] | None:
    if sources is None:
        return None
    if isinstance(sources, str):
        sources = [sources]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise InvalidContentError(
            f"sources must be a non-empty list drawn from {', '.join(SOURCES)}; "
            f"got {list(sources)}",
            field="sources",
        )
    return list(sources)


class SearchInput(NamedTuple):
    user_id: str
    query: str
    top_k: int
    sources: list[str] | None
    as_of: datetime | None


def check_search(
    user_id: object,
    query: object,
    top_k: object,
    sources: Sequence[str] | None = None,
    as_of: object = None,
) -> SearchInput:
    """Every check of a search's arguments, in the order a caller is told of them: the
    search service's, and ``memstrata search``'s before it opens anything."""
    return SearchInput(
        validate_user_id(user_id),
        check_query(query),
        check_top_k(top_k),
        check_sources(sources),
        check_as_of(as_of),
    )
