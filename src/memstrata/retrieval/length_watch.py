"""The embedding API's vector length against the length of the vectors stored for it.

A model's API may answer, in a new process, with another length than most of its stored
vectors have (a model swapped behind the same name, a proxy cutting vectors): searches
then cannot use those vectors. :class:`LengthWatch` notices (``embedding.dimension_changed``),
counts the rows into the healer's backlog, and tells it which stored lengths to re-embed
(``wrong_lengths``): at once with ``dimensions`` configured, else once the new length has
lasted ``LENGTH_SETTLE_S``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from sqlalchemy.orm import Session, sessionmaker

from memstrata.config import STORED_VECTOR_DIM
from memstrata.logs import log_event
from memstrata.retrieval import queue
from memstrata.retrieval.embedding_answer import MIN_LEARNED_DIMENSIONS, Lengths
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder

logger = logging.getLogger(__name__)

# A model without ``dimensions`` whose API answers, in a new process, with another length
# than most of its stored vectors have: the stored length is superseded — its rows are
# re-embedded — once the API has gone on answering the new length for this long. Until
# then the rows count as pending and searches say that they cannot use them. A transient
# fault (a proxy cutting vectors for a few minutes around a restart) thus re-embeds
# nothing, while a lasting change (a model swapped behind the same name) heals by itself.
LENGTH_SETTLE_S = 600.0


def wrong_lengths(lengths: Lengths, superseded: frozenset[int] = frozenset()) -> queue.WrongLength:
    """The stored lengths of the model's vectors that are wrong, given what the client
    knows: with a configured length, every other; else lengths no model gives (below
    ``MIN_LEARNED_DIMENSIONS``: stored before the client refused them), the lengths the
    client replaced (the API answered with another length since, consistently) and the
    stored lengths the API's length ``superseded`` across a restart (``follow_lengths``).
    A length merely different from a freshly learned one is left alone: the learned one
    may be the wrong one (a restart while the API cuts vectors), and re-embedding every
    stored vector with it at once would spread the damage."""
    if lengths.configured and lengths.known is not None:
        return queue.WrongLength(lengths.known, lengths.known)
    stale = tuple(sorted((lengths.replaced | superseded) - {lengths.known}))
    return queue.WrongLength(MIN_LEARNED_DIMENSIONS, STORED_VECTOR_DIM, stale)


def majority_length(stored: Mapping[int, int]) -> int | None:
    """The length most of a model's stored vectors have (``stored``: length -> rows),
    among lengths a model may give; a tie goes to the longer. None: no such vector."""
    lowest, highest = MIN_LEARNED_DIMENSIONS, STORED_VECTOR_DIM
    plausible = {d: n for d, n in stored.items() if lowest <= d <= highest}
    if not plausible:
        return None
    return max(plausible, key=lambda d: (plausible[d], d))


class LengthWatch:
    """The stored lengths of one model against its API's (module doc); one per healer,
    used by its one thread."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        embedder: OpenAICompatibleEmbedder,
        probe: Callable[[], str | None],
    ) -> None:
        self._sessions = sessions
        self.embedder = embedder
        self._probe = probe  # None when the API embeds the probe text now
        # The model's stored lengths (length -> rows), read once per rule (follow).
        self._stored: dict[int, int] | None = None
        self._stored_rule: queue.WrongLength | None = None
        # Stored lengths the API's length superseded across a restart (LENGTH_SETTLE_S).
        self.superseded: frozenset[int] = frozenset()
        # (stored length, the API's length, since) while a supersession waits to settle.
        self._awaiting: tuple[int, int, float] | None = None
        self._told: set[tuple[int, int]] = set()
        # Rows of a wrong length (by the rule) and of an awaited length: counted into the
        # backlog, since ``queue.backlog`` cannot count them without reading the table.
        self.wrong_rows = 0
        self.awaiting_rows = 0

    def rule(self) -> queue.WrongLength:
        """Which stored lengths are wrong now (``wrong_lengths``)."""
        return wrong_lengths(self.embedder.lengths, self.superseded)

    @property
    def pending(self) -> int:
        """Rows to count into the backlog: of a wrong length, or of an awaited one."""
        return self.wrong_rows + self.awaiting_rows

    def relengthed(self, rows: int) -> None:
        self.wrong_rows = max(0, self.wrong_rows - rows)

    def none_left(self) -> None:
        self.wrong_rows = 0

    def follow(self) -> None:
        """Compare the API's length (once known) with the length most stored vectors of
        the model have, read once per process and rule (``queue.stored_lengths``), and
        count the rows of a wrong length into the backlog.

        Another length means the API changed across a restart (before, the process that
        saw the change was the only one to re-embed): ``embedding.dimension_changed`` is
        logged once. With ``dimensions`` configured the old rows are wrong at once
        (``wrong_lengths``). Without it, the stored length is superseded once the API has
        gone on answering the new one for ``LENGTH_SETTLE_S`` (a probe confirms it): the
        rows are pending meanwhile, and nothing is re-embedded if the API goes back to the
        stored length, as after a transient fault."""
        lengths = self.embedder.lengths
        if lengths.known is None:
            return  # no answer yet: nothing to compare
        rule = wrong_lengths(lengths, self.superseded)
        if self._stored is None or rule != self._stored_rule:
            with self._sessions() as session:
                self._stored = queue.stored_lengths(session, self.embedder.name)
            self._stored_rule = rule
            self.wrong_rows = sum(n for d, n in self._stored.items() if rule.matches(d))
        stored = majority_length(self._stored)
        if stored is None or stored == lengths.known or stored in lengths.replaced:
            self._awaiting, self.awaiting_rows = None, 0  # no change, or this process saw it
            return
        self._tell_changed(stored, lengths.known, lengths.configured)
        if rule.matches(stored):  # configured, or superseded already
            self._awaiting, self.awaiting_rows = None, 0
            return
        now = time.monotonic()
        if self._awaiting is None or self._awaiting[:2] != (stored, lengths.known):
            self._awaiting = (stored, lengths.known, now)
            self.awaiting_rows = self._stored.get(stored, 0)
            return
        if now - self._awaiting[2] < LENGTH_SETTLE_S:
            return
        if self._probe() is not None or self.embedder.lengths.known != lengths.known:
            return  # not confirmed now: asked again next round
        self.superseded |= {stored}
        self._awaiting, self.awaiting_rows = None, 0
        log_event(
            logger,
            "embedding.dimension_superseded",
            logging.WARNING,
            model=self.embedder.name,
            previous=stored,
            dimensions=lengths.known,
            settled_s=LENGTH_SETTLE_S,
        )
        self.follow()  # the rule changed: count the rows it now finds wrong

    def _tell_changed(self, stored: int, answered: int, configured: bool) -> None:
        if (stored, answered) in self._told:
            return
        self._told.add((stored, answered))
        rows = (self._stored or {}).get(stored, 0)
        after_s = 0.0 if configured else LENGTH_SETTLE_S
        log_event(
            logger,
            "embedding.dimension_changed",
            logging.WARNING,
            model=self.embedder.name,
            previous=stored,
            dimensions=answered,
            stored_rows=rows,
            configured=configured,
            re_embed_after_s=after_s,
            effect=f"most stored vectors of this model have {stored} numbers and the API "
            f"answers {answered}: searches cannot use them (BM25 for those rows, with a "
            "warning) and they count as pending; "
            + (
                "they are re-embedded now (`dimensions` is configured)"
                if configured
                else f"they are re-embedded once the API has answered {answered} for "
                f"{after_s:g} s (at once with `dimensions` set to {answered}); if the API "
                f"answers {stored} again before that, nothing is re-embedded"
            ),
        )
