"""The memory routes' bodies (spec §3): search, a conversation turn, a batch of turns.
The MCP tools take the same (``mcp.turn_tools``, ``mcp.agent_tools``). Field names are
spec §3's, byte for byte."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from memstrata.api.input_errors import Taker, json_kind, reworded
from memstrata.api.schemas import ErrorBody
from memstrata.db.integers import MAX_INT
from memstrata.retrieval import hit_marks
from memstrata.retrieval.limits import DEFAULT_TOP_K, MAX_QUERY_CHARS, MAX_TOP_K, Source
from memstrata.retrieval.rounds import MAX_BATCH_TURNS
from memstrata.retrieval.session_ids import MAX_SESSION_ID_LENGTH, SESSION_ID_RULE
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES, TURN_LIMIT_RULE

_NUMBER_TEXT = re.compile(r"[+-]?\d+(?:\.\d*)?")
_DATE_START = re.compile(r"\d{4}-")  # a year, then a date's first separator


ISO_8601_HINT = (
    "Input should be an ISO 8601 date-time string, e.g. 2026-01-01T12:00:00Z, or leave it out"
)


def iso_8601_only(value: object, parse: ValidatorFunctionWrapHandler) -> object:
    """A date-time argument as sent: ISO 8601 text (or a ``datetime`` from Python), else a
    validation error. Pydantic's lax mode would read a number as seconds since 1970, which
    the schema (a ``date-time`` string) does not offer; a client sending one by mistake got
    its turn stored under that date. Text that does not parse (``"tomorrow"``) is told the
    format with an example, where pydantic said only "input is too short" (its reason is
    kept for text that starts as a date: it names the part at fault). One rule for
    REST and the MCP tool (its turn body is :class:`TurnRequest`)."""
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value):
        # Pydantic reads a string of digits as seconds since 1970 too.
        raise PydanticCustomError(
            "datetime_type",
            "Input should be an ISO 8601 date-time string, not a number in a string",
        )
    if value is not None and not isinstance(value, (str, datetime)):
        kind = json_kind(value)
        raise PydanticCustomError(
            "datetime_type",
            "Input should be an ISO 8601 date-time string, not {kind}",
            {"kind": kind},
        )
    try:
        return parse(value)
    except ValidationError as exc:
        # The parser's reason points at the part to fix of text shaped as a date already
        # ("month value is outside expected range of 1-12"); of a word ("yesterday") it is
        # "input is too short", which tells the reader nothing the example does not.
        dated = isinstance(value, str) and _DATE_START.match(value) is not None
        errors = exc.errors() if dated else []
        reasons = "; ".join(str((e.get("ctx") or {}).get("error", "")) for e in errors)
        raise PydanticCustomError(
            "datetime_parsing",
            ISO_8601_HINT + (" ({reason})" if reasons.strip("; ") else ""),
            {"reason": reasons},
        ) from exc


IsoDateTime = Annotated[datetime, WrapValidator(iso_8601_only)]


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The bounds are checked by ``SearchService.search`` (the one definition, whose message
    # a bad query or top_k gets: 422 as for any InvalidContentError); the schema documents them.
    query: StrictStr = Field(
        description="What to look for: not blank.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS},
    )
    top_k: StrictInt = Field(
        default=DEFAULT_TOP_K, json_schema_extra={"minimum": 1, "maximum": MAX_TOP_K}
    )
    sources: Annotated[list[Source], Field(min_length=1)] | None = Field(
        default=None, description="Restrict to these sources; all when omitted."
    )
    marks: StrictBool = Field(
        default=False,
        description="Also give each hit's `marks`: where in its text the query's words are, "
        "by the keyword search's own rule.",
    )
    as_of: IsoDateTime | None = Field(
        default=None,
        description="Search as of this time (ISO 8601; default now), from "
        "1970-01-01T00:00:00Z to a few minutes in the future: decay is measured from "
        "it and conversation/notes rows dated after it are left out. The resident files "
        "(USER.md, MEMORY.md) have no history and always take part.",
    )


class Explain(BaseModel):
    """How a hit's score came about (``fusion.Explained``); ranks are 1-based."""

    bm25_rank: int | None = Field(description="Rank in the BM25 candidates; null if absent.")
    vector_rank: int | None = Field(description="Rank in the vector candidates; null if absent.")
    rrf_score: float = Field(description="Sum of 1 / (60 + rank) over both rankings.")
    decay_factor: float = Field(description="Time-decay multiplier (1 for resident files).")
    age_days: float | None
    resident: bool = Field(description="USER/MEMORY/SOUL/AGENTS.md: never decays.")
    # Only convex fusion ranks by it, so only then does the search give one.
    convex_score: float | None = Field(
        default=None,
        description="When MEMSTRATA_SEARCH_FUSION=convex ranked: the convex fusion score "
        "before decay (a weighted sum of the BM25 and cosine scores, each min-max normalised "
        "over its candidates); null under RRF.",
    )
    context_chars: int = Field(
        default=0,
        ge=0,
        description="How many leading characters of `text` are the end of the previous "
        "round, indexed with this one so a short reply is found by what it answered; the "
        "hit's own turn starts after them (0: no such context).",
    )


class SearchHitBody(BaseModel):
    text: str
    file_path: str | None = Field(examples=["MEMORY.md", "sessions/s1/3"])
    chunk_index: int | None
    source: Source
    created_at: str = Field(description="ISO 8601 timestamp of the row.")
    source_ids: list[str] = Field(description="The conversation turns the hit covers.")
    score: float
    explain: Explain
    marks: list[tuple[int, int]] | None = Field(
        default=None,
        description="Only when the request asked for `marks`: the `[start, end)` stretches "
        "of `text` that match the query, in order, as UTF-16 code units (a JavaScript "
        "string's indexes): the words whose search terms the query has (case-folded, "
        "NFKC, stemmed, stop words never), and each CJK character (or Thai, Lao, Tibetan, "
        "Myanmar, Khmer cluster) that a pair of the query covers or that the query has "
        "alone.",
        # Absent rather than null unless asked for: the spec's answer stays as it is.
        exclude_if=lambda marks: marks is None,
    )


class SearchResults(BaseModel):
    query: str
    mode: Literal["hybrid", "bm25"] = Field(
        description="bm25 when no embedding API is configured, the query's embedding failed, "
        "or none of the user's rows has a vector yet; `warnings` says which."
    )
    hits: list[SearchHitBody]
    timings_ms: dict[str, float]
    warnings: list[str] = Field(
        description="Why a side of the search could not take part (no embedding API, a failed "
        "query embedding, no vectors yet, a query with no searchable words); empty otherwise."
    )

    @classmethod
    def of(cls, answer: dict[str, Any], *, marked: bool) -> SearchResults:
        """The search's ``to_dict()``, each hit with its ``marks`` when ``marked``."""
        results = cls.model_validate(answer)
        if marked:
            terms = hit_marks.mark_terms(results.query)
            for hit in results.hits:
                hit.marks = hit_marks.marks(hit.text, terms)
        return results


class IndexReportBody(BaseModel):
    """What indexing one conversation round changed."""

    file_path: str = Field(examples=["sessions/s1/3"])
    chunks: int
    inserted: int
    deleted: int
    unchanged: int
    embedded: int
    embedding_failed: int
    deferred: int = Field(
        description="Rows stored for the background worker to embed (`embed: background`)."
    )
    embed_seconds: float
    warnings: list[str]


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_index: Annotated[StrictInt, Field(ge=0, le=MAX_INT)] = Field(
        description="The turn's position in its conversation (0, 1, …); posting the same "
        "index again replaces that turn."
    )
    # The size rule is the service's (``retrieval.turn_limit``: it names the field over it);
    # the schema states it, and maxLength the bound it implies in characters.
    user_message: StrictStr = Field(
        default="",
        description=f"What the user said. {TURN_LIMIT_RULE}.",
        json_schema_extra={"maxLength": MAX_TURN_BYTES},
    )
    assistant_reply: StrictStr = Field(
        default="",
        description=f"What the assistant answered. {TURN_LIMIT_RULE}.",
        json_schema_extra={"maxLength": MAX_TURN_BYTES},
    )
    timestamp: IsoDateTime | None = Field(
        default=None,
        description="When the turn happened (ISO 8601; without an offset: UTC, a date alone "
        "00:00 UTC), from 1970-01-01T00:00:00Z to a few minutes in the future; default now "
        "(a re-post of the same text keeps the stored time). Drives decay.",
    )


# -- batch ingestion (POST /api/memory/conversations/turns:batch) -------------------------


class BatchTurn(TurnRequest):
    """A turn of the single-turn endpoint's body, with the conversation it belongs to (as
    the MCP tool's arguments, ``mcp.turn_tools``)."""

    # The rule is checked by ``retrieval.session_ids.check_session_id`` (the one definition);
    # the schema only documents it.
    session_id: StrictStr = Field(
        description=SESSION_ID_RULE,
        json_schema_extra={"minLength": 1, "maxLength": MAX_SESSION_ID_LENGTH},
    )


@dataclass(frozen=True)
class InvalidBatchTurn:
    """A batch turn that failed the schema: kept (not raised) so the route can list every
    invalid turn in the batch's 422 shape (``{index, session_id, turn_index, error,
    field}``). ``field``: the turn's field at fault, None when the turn is no object or
    several fields are at fault (``error`` names each)."""

    session_id: str | None
    turn_index: int | None
    error: str
    field: str | None = None


_A_TURN = Taker("a turn", "field", BatchTurn)  # as a batch turn's refusal names it


def _batch_turn(value: Any) -> BatchTurn | InvalidBatchTurn:
    if not isinstance(value, dict | BatchTurn):
        # Pydantic's "valid dictionary or instance of BatchTurn" names a class of ours.
        error = f"turn: each turn must be a JSON object, not {json_kind(value)}"
        return InvalidBatchTurn(None, None, error)  # no field: the turn itself is at fault
    try:
        return BatchTurn.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            reworded(e, _A_TURN) or f"{'.'.join(str(p) for p in e['loc']) or 'turn'}: {e['msg']}"
            for e in exc.errors()
        )
        fields = value if isinstance(value, dict) else {}
        session_id = fields.get("session_id")
        turn_index = fields.get("turn_index")
        return InvalidBatchTurn(
            session_id if isinstance(session_id, str) else None,
            turn_index
            if isinstance(turn_index, int) and not isinstance(turn_index, bool)
            else None,
            problems,
            _field_at_fault(exc),
        )


def _field_at_fault(exc: ValidationError) -> str | None:
    """The one top-level field every error of ``exc`` is about (an unknown one too: it is
    what to remove), else None."""
    named = {e["loc"][0] if e["loc"] else None for e in exc.errors()}
    only = named.pop() if len(named) == 1 else None
    return only if isinstance(only, str) else None


# Documented (OpenAPI) as a BatchTurn; validated one by one so a bad turn does not hide
# the others.
BatchTurnItem = Annotated[
    BatchTurn | InvalidBatchTurn, PlainValidator(_batch_turn, json_schema_input_type=BatchTurn)
]


class BatchTurnsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    turns: Annotated[list[BatchTurnItem], Field(min_length=1, max_length=MAX_BATCH_TURNS)] = Field(
        description=f"1 to {MAX_BATCH_TURNS} turns, of one or several sessions; the whole "
        "request body is also bounded by MEMSTRATA_MAX_REQUEST_BYTES (1 MiB by default)."
    )
    embed: Literal["inline", "background"] = Field(
        default="inline",
        description="`inline`: the turns are embedded before the response (as the single-turn "
        "endpoint does). `background`: they are stored and searchable with BM25 at once, and "
        "the background worker embeds them afterwards (`/readyz` shows the rows still "
        "`pending`) — for importing a long history without waiting for the embedding API.",
    )


class BatchTurnsResult(BaseModel):
    turns: int = Field(description="Turns in the request (all stored).")
    inserted: int = Field(description="Rows written, summed over the turns.")
    unchanged: int
    embedded: int = Field(description="Rows stored with a vector.")
    embedding_failed: int = Field(
        description="Rows stored without a vector (embedding API failure); they are searched "
        "with BM25 until re-embedded."
    )
    deferred: int = Field(
        description="Rows stored for the background worker to embed (`embed: background`)."
    )
    reports: list[IndexReportBody] = Field(description="One report per turn, in request order.")


class BatchTurnError(BaseModel):
    index: int = Field(description="Position of the turn in the request's `turns`.")
    session_id: str | None
    turn_index: int | None
    error: str
    field: str | None = Field(
        description="The turn's field at fault (`session_id`, `turn_index`, `user_message`, "
        "`assistant_reply`, `timestamp`, or an unknown field's name); null when no one "
        "field is: the turn is no object, has no text, is given twice, or several fields "
        "are at fault (`error` names each)."
    )


class BatchTurnsRejected(BaseModel):
    """422: nothing was stored; every invalid turn is listed."""

    detail: str
    errors: list[BatchTurnError]


# The batch route's 422 is one of two shapes: invalid turns (``BatchTurnsRejected``) or a
# request whose own shape is wrong — no ``turns``, too many, a bad ``embed`` — answered like
# any other route's 422 (``ErrorBody``, generic ``{loc, msg, type}`` errors). ``anyOf``, not
# ``oneOf``: a per-turn answer also fits ``ErrorBody``'s loose ``errors``.
BATCH_REJECTED_RESPONSE: dict[str, object] = {
    "model": BatchTurnsRejected | ErrorBody,
    "description": "Invalid turns (`BatchTurnsRejected`: nothing was stored) or an invalid "
    "request (`ErrorBody`: no `turns`, more than the limit, an unknown `embed`).",
}
