"""The docs a batch of conversation rounds writes, built from the rounds and the rows
their neighbours have stored (``indexer.Indexer.index_rounds``).

A round's first chunk carries the tail of the previous round as context, so indexing a
round reads two neighbours of it: the previous round (its text is the context) and the
next one (its context is this round, so it is indexed again). Pure functions: the indexer
reads the rows (``paths_to_read``) and hands them to ``round_docs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memstrata.retrieval.chunk import chunk_text
from memstrata.retrieval.records import StoredChunk
from memstrata.retrieval.rounds import Doc, OwnRound, round_doc, session_path, stored_round
from memstrata.retrieval.staging import basis_of

# Each neighbour path's stored (chunk index, content hash) pairs: what the docs were built
# from, checked again when they are written (``staging.StagedIndex``).
Basis = dict[str, frozenset[tuple[int, str]]]


def neighbour_paths(own: dict[str, OwnRound]) -> set[str]:
    """The paths of the rounds just before and just after each of ``own``, not in it."""
    return {
        session_path(o.session_id, o.turn_index + d)
        for o in own.values()
        for d in (-1, 1)
        if o.turn_index + d >= 0
    } - set(own)


def undated_paths(own: dict[str, OwnRound]) -> set[str]:
    """Rounds sent without a timestamp: their stored version, if any, keeps its time."""
    return {o.path for o in own.values() if not o.dated}


def paths_to_read(valid: Sequence[OwnRound]) -> list[str]:
    """Every path whose stored rows ``round_docs`` needs, sorted."""
    own = {o.path: o for o in valid}
    return sorted(neighbour_paths(own) | undated_paths(own))


def own_text(o: OwnRound, chunk_tokens: int) -> str:
    """A round's own text as ``stored_round`` rebuilds it from its rows."""
    return "\n\n".join(chunk_text(o.text, chunk_tokens))


def round_docs(
    valid: Sequence[OwnRound],
    stored: Sequence[StoredChunk],
    chunk_tokens: int,
    context_tokens: int,
) -> tuple[list[Doc], Basis]:
    """The docs of ``valid`` (first, in order) and of the next rounds stored after them,
    and the basis: the neighbours' stored rows they were built from. ``stored`` holds the
    rows of the paths ``paths_to_read(valid)`` names."""
    own: dict[str, OwnRound] = {o.path: o for o in valid}
    wanted = neighbour_paths(own)
    undated = undated_paths(own)
    by_path: dict[str, list[StoredChunk]] = {}
    for c in stored:
        by_path.setdefault(c.file_path or "", []).append(c)
    found_rounds = {
        path: found for path, cs in by_path.items() if (found := stored_round(cs)) is not None
    }
    neighbours = {path: r for path, r in found_rounds.items() if path in wanted}
    for path in undated:
        # "now" is only the default time of a new turn: the same turn re-sent with
        # the same text and no timestamp keeps its stored time (and so its rows).
        before = found_rounds.get(path)
        if before is not None and before.text == own_text(own[path], chunk_tokens):
            own[path] = replace(own[path], created_at=before.created_at)

    def previous(o: OwnRound) -> OwnRound | None:
        p = session_path(o.session_id, o.turn_index - 1) if o.turn_index > 0 else ""
        return own.get(p) or neighbours.get(p)

    docs = [round_doc(o, previous(o), chunk_tokens, context_tokens) for o in own.values()]
    for o in list(own.values()):
        after = neighbours.get(session_path(o.session_id, o.turn_index + 1))
        if after is not None:
            docs.append(round_doc(after, o, chunk_tokens, context_tokens))
    basis = basis_of([c for c in stored if (c.file_path or "") in wanted], wanted)
    return docs, basis
