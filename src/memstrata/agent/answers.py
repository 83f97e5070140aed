"""The memory tools' answer texts: what a sync result, an unreadable file or a search hit
tells the model (``docs/AGENT_TOOLS.md``), and whether the call failed (:class:`ToolAnswer`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

import regex

from memstrata.retrieval.tokenize import tokenize
from memstrata.sandbox.results import Outcome, SyncResult
from memstrata.text import grapheme_cut

if TYPE_CHECKING:  # numpy and the retrieval stack load only where a searcher is built
    from memstrata.retrieval.ranking import SearchHit

HIT_PREVIEW_CHARS = 400

_CLUSTER = regex.compile(r"\X")
_NOT_ASCII_WORD = re.compile(r"[^0-9a-z]")


class ToolAnswer(str):
    """A memory tool's answer: the text the model reads (a plain ``str`` to any agent
    framework) and ``failed``, decided where the text is built. A failed call stored
    nothing the model may count on — an ``error: …``, or an edit that overlapped the
    user's and was not saved — so MCP answers it as ``isError`` without parsing the text."""

    failed: bool

    def __new__(cls, text: str, *, failed: bool = False) -> ToolAnswer:
        answer = super().__new__(cls, text)
        answer.failed = failed
        return answer


def error(message: str) -> ToolAnswer:
    """A failed call's answer: ``error: <message>``."""
    return ToolAnswer(f"error: {message}", failed=True)


def unreadable(name: str, exc: Exception) -> ToolAnswer:
    return error(f"{name} cannot be read right now ({type(exc).__name__}); try later")


def sync_message(
    done: str, result: SyncResult, *, workspace_stale: bool = False, rounds: bool = True
) -> ToolAnswer:
    """The tool's answer for a sync ``result``. ``rounds`` (``ToolContext.rounds``): a
    round end will read the sandbox copy back; without one (MCP), an edit the DB did not
    get is an ``error:`` to retry, since the retry's read-back stores the copy."""
    name = result.filename
    version = "" if result.version is None else f" (version {result.version})"
    note = (
        " The workspace copy could not be updated; it is refreshed next session."
        if workspace_stale
        else ""
    )
    if result.outcome in (Outcome.WRITTEN, Outcome.UNCHANGED):
        return ToolAnswer(f"{done}{version}.{note}")
    if result.outcome is Outcome.MERGED:
        return ToolAnswer(
            f"{done}{version}, merged with an edit the user made at the same time.{note}"
        )
    if result.outcome is Outcome.DB_UNAVAILABLE:
        if workspace_stale:
            return could_not_be_saved(name)
        if not rounds:
            return _not_stored_yet(name, "storage is unreachable")
        # Not failed: the round end stores the sandbox copy.
        return ToolAnswer(
            f"{done} in the workspace; storage is unreachable, it will be saved later."
        )
    if result.outcome is Outcome.CONFLICT:
        # Failed, though no "error:": the user's version won and this edit is not stored.
        return ToolAnswer(
            f"Not saved: the user edited {name} at the same time and the edits overlap. "
            f"Their version was kept ({result.detail}). Read {name} again and reapply "
            "your change if it is still needed.",
            failed=True,
        )
    if result.outcome is Outcome.REJECTED:
        return error(f"{name} was not saved: {result.detail}")
    if result.outcome is Outcome.SANDBOX_FAILED:
        if not rounds:
            return _not_stored_yet(name, "syncing the workspace copy failed")
        return ToolAnswer(
            f"{done} in the workspace; syncing it failed and is retried at the end of the round."
        )
    return ToolAnswer(f"{done}{version}.")


def could_not_be_saved(name: str) -> ToolAnswer:
    """Neither the sandbox nor the database took the edit: nothing was stored anywhere."""
    return error(f"{name} could not be saved: storage is unreachable. Try again later.")


def _not_stored_yet(name: str, why: str) -> ToolAnswer:
    # An error (MCP: isError), yet not one to repeat: the change is in the sandbox copy,
    # whose read-back at the next call on the file stores it; repeating record_memory
    # would store it twice.
    return error(
        f"{name} is not stored yet: {why}. The change is kept in the workspace copy "
        f"and is stored by the next memory tool call on {name}; do not repeat it."
    )


def format_hit(position: int, hit: SearchHit, query: str) -> str:
    when = f" · {hit.created_at.date().isoformat()}"
    text = _preview(" ".join(hit.text.split()), query)
    return f"{position}. [{hit.file_path or 'memory'}{when} · score {hit.score:.3f}] {text}"


def _preview(text: str, query: str, limit: int = HIT_PREVIEW_CHARS) -> str:
    """At most ``limit`` characters of ``text``, around the first query term it contains,
    cut between grapheme clusters.

    A memory-file chunk can run to 512 tokens; its first lines are usually headings, so a
    plain prefix would often hide exactly the line that matched.
    """
    if len(text) <= limit:
        return text
    anchor = first_match(text, query)
    start = 0 if anchor is None else max(0, anchor - limit // 4)
    start = grapheme_cut(text, min(start, len(text) - limit))
    end = grapheme_cut(text, start + limit, floor=start)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def first_match(text: str, query: str) -> int | None:
    """Where in ``text`` the first of the query's BM25 terms begins, or None.

    Terms of two or more characters go first: a lone CJK character of the query (乌 of
    乌龙茶) turns up anywhere, its bigram (乌龙) where the hit is. Unstemmed terms count
    too, since a stem ("party" of "parties") is not always in the text.
    """
    terms = set(tokenize(query)) | set(tokenize(query, stem=False))
    if not terms:
        return None
    folded, origin = _as_indexed(text)
    for wanted in ([t for t in terms if len(t) > 1], list(terms)):
        found = [at for term in wanted if (at := folded.find(term)) >= 0]
        if found:
            return origin[min(found)]
    return None


def _as_indexed(text: str) -> tuple[str, Sequence[int]]:
    """``text`` as the search tokenizer reads it, and for each of its characters the index
    in ``text`` of the grapheme cluster it came from.

    Folded one cluster at a time: NFKC and case folding change lengths (ß, İ, ﬁ, NFD
    accents), so positions in a folded copy of the whole text would not index ``text``.
    A cluster is the unit normalisation acts within, so each folds as it would in place.
    """
    if text.isascii():  # most memory: one character each way, at a fraction of the cost
        return _NOT_ASCII_WORD.sub(" ", text.lower()), range(len(text))
    pieces: list[str] = []
    origin: list[int] = []
    folds: dict[str, str] = {}  # a chunk repeats few distinct clusters
    for cluster in _CLUSTER.finditer(text):
        piece = folds.get(cluster.group())
        if piece is None:
            piece = folds[cluster.group()] = _fold_cluster(cluster.group())
        pieces.append(piece)
        origin.extend([cluster.start()] * len(piece))
    return "".join(pieces), origin


def _fold_cluster(cluster: str) -> str:
    terms = tokenize(cluster, frozenset(), stem=False, cjk_bigrams=False)
    if terms:
        return " ".join(terms)
    # No term: whitespace, punctuation or an emoji separates words; what the tokenizer
    # drops inside a word (a joiner, a soft hyphen, a vowel point) does not.
    separates = any(unicodedata.category(c)[0] in "PSZ" or c.isspace() for c in cluster)
    return " " if separates else ""
