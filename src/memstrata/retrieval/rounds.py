"""Conversation rounds → indexed text, with the previous round as context.

A row for round *t* of a session starts with the tail of round *t − 1* (at most
``context_tokens`` tokens, and only as much as fits in the chunk; started after a space or
line break near the cut, or, in text without spaces such as Chinese, at the cut itself:
``tail_within``), then the round itself.
Questions about a conversation usually hinge on an exchange — "what did Melanie paint?"
answered by "Yeah, the lake sunrise" right after the question — and a round alone often
lacks the words that make it findable. On the LoCoMo dev set this raised hybrid
recall@10 from 0.59 to 0.70 (docs/BENCHMARKS.md). The row declares the context's turns
in ``context.source_ids``, so a hit covers (and is scored as) both rounds: no free recall.

Re-indexing round *t − 1* with new text re-indexes round *t* too, so a context is never
stale.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import regex

from memstrata.db.integers import MAX_INT
from memstrata.errors import InvalidContentError
from memstrata.errors import RoundsInvalidError as RoundsInvalidError
from memstrata.retrieval.chunk import chunk_text
from memstrata.retrieval.records import SESSION_PREFIX, StoredChunk
from memstrata.retrieval.session_ids import check_session_id
from memstrata.retrieval.tokenize import CJK_CHAR, count_tokens
from memstrata.retrieval.turn_limit import check_turn_size
from memstrata.text import grapheme_cut, unstorable_text

MIN_CONTEXT_TOKENS = 8  # less context than this is noise, not help
# How far past the earliest start that fits a round's context looks for a space or line
# break to start at (``tail_within``): about a long word. Further, the boundary belongs
# to text without spaces, where jumping to it dropped nearly all of the context (a Chinese
# round kept 2 of 128 tokens: everything up to "Assistant: ").
WORD_REACH = 24
_GAP = re.compile(r"[ \n]")
_CLUSTER = regex.compile(r"\X")
# Most turns one batch request may carry (POST /api/memory/conversations/turns:batch); the
# request body is also bounded by MEMSTRATA_MAX_REQUEST_BYTES (1 MiB by default), and each
# turn's text by turn_limit.MAX_TURN_BYTES.
MAX_BATCH_TURNS = 500
# A round stamped later than now + this is refused: a future timestamp would get an age
# below zero and outrank everything under decay. The margin absorbs clock skew between
# the caller and this server.
MAX_FUTURE_SKEW = timedelta(minutes=5)
# A round stamped before this is refused: conversation turns before the Unix epoch are not
# real, and a time PostgreSQL can store but psycopg cannot read back (before year 1 UTC)
# would break every later read of the user's rows.
EARLIEST_TIMESTAMP = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Round:
    """One conversation round: the user's message and the assistant's reply."""

    session_id: str
    turn_index: int
    user_message: str
    assistant_reply: str = ""
    timestamp: datetime | None = None
    source_ids: Sequence[str] | None = None


@dataclass(frozen=True)
class OwnRound:
    """A validated round: its path, its own text, time and turn ids (no context yet)."""

    path: str
    session_id: str
    turn_index: int
    text: str
    created_at: datetime
    source_ids: list[str]
    # False when the caller gave no timestamp (``created_at`` is then "now"): re-indexing
    # the same text keeps the stored time (``Indexer.index_rounds``).
    dated: bool = True


@dataclass(frozen=True)
class Doc:
    """What the indexer writes under one ``file_path``: chunk texts and their context."""

    file_path: str
    texts: list[str]
    created_at: datetime | None
    source_ids: Sequence[str] | None
    contexts: list[dict[str, Any] | None] | None = None


def session_path(session_id: str, turn_index: int) -> str:
    return f"{SESSION_PREFIX}{session_id}/{turn_index}"


def format_round(user_message: str, assistant_reply: str) -> str:
    """The text indexed for one round; either side may be empty."""
    parts = []
    if user_message.strip():
        parts.append(f"User: {user_message.strip()}")
    if assistant_reply.strip():
        parts.append(f"Assistant: {assistant_reply.strip()}")
    return "\n".join(parts)


def validate_round(r: Round, now: datetime | None = None) -> OwnRound:
    if not isinstance(r, Round):
        raise InvalidContentError(
            f"a round must be a memstrata.retrieval.rounds.Round, got {type(r).__name__}"
        )
    check_session(r.session_id, r.turn_index)
    for name, value in (("user_message", r.user_message), ("assistant_reply", r.assistant_reply)):
        check_text(name, value)
    # Before the text is formatted, chunked or embedded: the one check every entry takes.
    check_turn_size(r.user_message, r.assistant_reply)
    body = format_round(r.user_message, r.assistant_reply)
    if not body:
        raise InvalidContentError(
            "a round needs user_message or assistant_reply (or both); both are empty or blank"
        )
    current = now or datetime.now(UTC)
    when = check_not_future(r.timestamp, current) if r.timestamp is not None else current
    ids = check_source_ids(r.source_ids) or [f"{r.session_id}:{r.turn_index}"]
    return OwnRound(
        session_path(r.session_id, r.turn_index),
        r.session_id,
        r.turn_index,
        body,
        when,
        ids,
        dated=r.timestamp is not None,
    )


def check_text(name: str, value: object) -> str:
    """A round's text: a string without NUL that UTF-8 can encode (no lone surrogates)."""
    field = name.partition("[")[0]  # ``source_ids[2]``: the input is source_ids
    if not isinstance(value, str):
        raise InvalidContentError(f"{name} must be a string", field=field)
    if (problem := unstorable_text(value, name)) is not None:
        raise InvalidContentError(problem, field=field)
    return value


def check_source_ids(value: object) -> list[str] | None:
    """A round's own turn ids: None (or empty: the default ``"<session_id>:<turn_index>"``)
    or a list of strings, each a valid ``check_text``. A string alone, numbers or other
    objects were once stored character by character or as their ``str()``."""
    if value is None:
        return None
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, Sequence)
        or not all(isinstance(i, str) for i in value)
    ):
        raise InvalidContentError(
            "source_ids must be a list of strings (the turn ids this round covers, e.g. "
            f'["s1:4"]), or None for the default "<session_id>:<turn_index>"; got '
            f"{reprlib.repr(value)}",
            field="source_ids",
        )
    return [check_text(f"source_ids[{n}]", i) for n, i in enumerate(value)]


def stored_round(chunks: Sequence[StoredChunk]) -> OwnRound | None:
    """Rebuild a round's own text and ids from its stored rows (context stripped)."""
    if not chunks:
        return None
    ordered = sorted(chunks, key=lambda c: c.chunk_index or 0)
    first = ordered[0]
    path = first.file_path or ""
    session_id, _, turn = path[len(SESSION_PREFIX) :].rpartition("/")
    own = [ordered[0].chunk_text[first.context_chars :]] + [c.chunk_text for c in ordered[1:]]
    return OwnRound(
        path, session_id, int(turn), "\n\n".join(own), first.created_at, list(first.source_ids)
    )


def round_doc(
    own: OwnRound, previous: OwnRound | None, chunk_tokens: int, context_tokens: int
) -> Doc:
    """Chunk a round; prefix its first chunk with the tail of ``previous`` when it fits."""
    texts = chunk_text(own.text, chunk_tokens)
    contexts: list[dict[str, Any] | None] = [None] * len(texts)
    if previous is not None and context_tokens > 0 and texts:
        budget = min(context_tokens, chunk_tokens - count_tokens(texts[0]))
        tail = tail_within(previous.text, budget) if budget >= MIN_CONTEXT_TOKENS else ""
        if tail:
            texts[0] = f"{tail}\n{texts[0]}"
            contexts[0] = {"chars": len(tail) + 1, "source_ids": list(previous.source_ids)}
    return Doc(own.path, texts, own.created_at, own.source_ids, contexts)


def tail_within(text: str, max_tokens: int) -> str:
    """The longest suffix of ``text`` within ``max_tokens``, started at a word boundary:
    after the first space or line break within ``WORD_REACH`` characters of the earliest
    start that fits, unless a CJK character comes before it; else (Chinese or Japanese,
    which need no space between words; Thai; a word longer than that) at the first
    grapheme-cluster boundary there. So unspaced text is not reduced to the few words
    after its next space, and no emoji or accent is cut in half."""
    if max_tokens <= 0:
        return ""
    if count_tokens(text) <= max_tokens:
        return text
    max_tokens -= 1  # room for the "…" that marks the cut
    lo, hi = 0, len(text)  # find the smallest start whose suffix fits (binary search)
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(text[mid:]) <= max_tokens:
            hi = mid
        else:
            lo = mid + 1
    gap = _GAP.search(text, lo, min(len(text) - 1, lo + WORD_REACH))
    if gap is not None and CJK_CHAR.search(text, lo, gap.start()) is None:
        start = gap.end()
    else:  # no space near, or CJK before it (each character a word): cut here
        start = _next_cluster_start(text, lo)
    return "…" + text[start:].lstrip() if text[start:].strip() else ""


def _next_cluster_start(text: str, index: int) -> int:
    """The first grapheme-cluster boundary at or after ``index``: a suffix from there is
    no longer than the one from ``index``, so it still fits."""
    before = grapheme_cut(text, index)
    if before == index:
        return index
    cluster = _CLUSTER.match(text, before)
    return cluster.end() if cluster is not None and cluster.end() > index else index


def check_session(session_id: str, turn_index: int) -> None:
    check_session_id(session_id)
    if isinstance(turn_index, bool) or not isinstance(turn_index, int):
        raise InvalidContentError(
            f"turn_index must be an integer from 0 to {MAX_INT}, got {reprlib.repr(turn_index)}",
            field="turn_index",
        )
    if not 0 <= turn_index <= MAX_INT:  # the REST and MCP bound: an integer column
        # (str() of an integer of thousands of digits raises ValueError itself)
        shown = turn_index if turn_index.bit_length() <= 64 else "a larger integer"
        raise InvalidContentError(
            f"turn_index must be from 0 to {MAX_INT}, got {shown}", field="turn_index"
        )


def check_round_list(rounds: object) -> Sequence[object]:
    """``rounds`` if it is a list (any sequence) of items to validate one by one; a single
    ``Round``, ``None`` or a string is an ``InvalidContentError``."""
    if isinstance(rounds, str | bytes) or not isinstance(rounds, Sequence):
        hint = "; wrap a single round in a list" if isinstance(rounds, Round) else ""
        raise InvalidContentError(
            "rounds must be a list of memstrata.retrieval.rounds.Round, got "
            f"{type(rounds).__name__}{hint}",
            field="rounds",
        )
    return rounds


@dataclass(frozen=True)
class RoundRefusal:
    """Why the round at ``index`` of a call was refused."""

    index: int
    given: object  # the round as the caller gave it
    error: InvalidContentError

    def entry(self) -> dict[str, Any]:
        """The error entry ``RoundsInvalidError.errors`` and the batch's 422 list."""
        # getattr: the round may be no Round at all (a library caller's dict).
        sid, turn = getattr(self.given, "session_id", None), getattr(self.given, "turn_index", None)
        return {
            "index": self.index,
            "session_id": sid if isinstance(sid, str) else None,
            "turn_index": turn if isinstance(turn, int) else None,
            "error": str(self.error),
            # The round's input at fault, as a one-turn 422 gives it in ``loc``; None for
            # a refusal of no one input (no text at all, a turn given twice).
            "field": self.error.field,
        }


def checked_rounds(
    rounds: Sequence[Round], now: datetime | None = None
) -> tuple[list[OwnRound], list[RoundRefusal]]:
    """Validate every round; return the valid ones and the refusal of each bad one, so a
    batch can be refused whole with every problem reported at once."""
    check_round_list(rounds)
    current = now or datetime.now(UTC)
    valid: list[OwnRound] = []
    refused: list[RoundRefusal] = []
    seen: set[str] = set()
    for n, r in enumerate(rounds):
        try:
            o = validate_round(r, current)
            if o.path in seen:
                raise InvalidContentError(
                    f"turn {r.turn_index} of session {r.session_id!r} appears twice in the batch"
                )
            seen.add(o.path)
            valid.append(o)
        except InvalidContentError as exc:
            refused.append(RoundRefusal(n, r, exc))
    return valid, refused


def validate_rounds(
    rounds: Sequence[Round], now: datetime | None = None
) -> tuple[list[OwnRound], list[dict[str, Any]]]:
    """:func:`checked_rounds` with one error entry per bad round (``{"index",
    "session_id", "turn_index", "error", "field"}``)."""
    valid, refused = checked_rounds(rounds, now)
    return valid, [r.entry() for r in refused]


def rounds_invalid(refused: Sequence[RoundRefusal], total: int) -> RoundsInvalidError:
    """The refusal of a call of ``total`` rounds: for one round, it names that round's
    input at fault (HTTP's single-turn 422 gives it as its ``loc``)."""
    field = refused[0].error.field if refused else None
    return RoundsInvalidError([r.entry() for r in refused], total, field=field)


def check_not_future(value: datetime, now: datetime | None = None) -> datetime:
    """``value`` made timezone-aware (UTC when naive). Refused when it does not convert to
    UTC within ``datetime``'s range, is before ``EARLIEST_TIMESTAMP`` (the Unix epoch) or
    later than now + ``MAX_FUTURE_SKEW``."""
    if not isinstance(value, datetime):
        raise InvalidContentError("timestamp must be a datetime", field="timestamp")
    when = aware(value)
    early_error("timestamp", when, "conversation turns before the Unix epoch are not real")
    current = now or datetime.now(UTC)
    if not in_utc_range(when) or when > current + MAX_FUTURE_SKEW:
        raise future_error("timestamp", value, current, "send when the turn happened")
    return when


def early_error(name: str, when: datetime, why: str) -> None:
    """Refuse the aware ``when`` of ``name`` (``timestamp``, ``as_of``) when it is before
    ``EARLIEST_TIMESTAMP``, saying ``why``. Year 1 with an offset east of UTC does not
    convert to UTC: it is early, not late."""
    in_range = in_utc_range(when)
    if when < EARLIEST_TIMESTAMP if in_range else when.year < EARLIEST_TIMESTAMP.year:
        earliest = EARLIEST_TIMESTAMP.isoformat().replace("+00:00", "Z")
        raise InvalidContentError(
            f"{name} {when.isoformat()} is too early: {name} must be on or after "
            f"{earliest} ({why})",
            field=name,
        )


def in_utc_range(when: datetime) -> bool:
    """Whether the aware ``when`` converts to UTC within ``datetime``'s range (year 1 or
    9999 with an offset may not)."""
    try:
        when.astimezone(UTC)
    except OverflowError:
        return False
    return True


def future_error(name: str, value: datetime, current: datetime, fix: str) -> InvalidContentError:
    """The refusal of a ``name`` (``timestamp``, ``as_of``) later than ``current`` +
    ``MAX_FUTURE_SKEW``: the server's time and the skew allowed, then ``fix``."""
    article = "An" if name[:1] in "aeiou" else "A"
    naive = (
        f". {article} {name} without a time zone is read as UTC: give its offset (ISO 8601 "
        "'+02:00'; in Python an aware datetime, e.g. datetime.now(UTC))"
        if value.tzinfo is None
        else ""
    )
    return InvalidContentError(
        f"{name} {aware(value).isoformat()} is in the future (server time "
        f"{current.isoformat(timespec='seconds')}, allowed skew "
        f"{int(MAX_FUTURE_SKEW.total_seconds())} s); {fix}{naive}",
        field=name,
    )


def aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
