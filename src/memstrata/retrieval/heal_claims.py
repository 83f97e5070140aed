"""The re-embedding worker's claims besides its plain one: the claims of gone workers taken
back, and rows whose vector of the worker's model has a wrong length.

Apart from :mod:`memstrata.retrieval.healing` because both are claims the round makes only
in some states (a worker gone, a length rule in force), each with the event that tells the
operator about it; the round decides when to make them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy.orm import Session

from memstrata.logs import log_event
from memstrata.retrieval import claimer, queue
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder

# The worker's events, under the logger they had before the claims left healing.py.
logger = logging.getLogger("memstrata.retrieval.healing")


def take_back(session: Session, model: str, kept: Iterable[queue.PendingUsers]) -> None:
    """Take back the claims of workers and reindex runs that are gone (``claimer.reclaim``)."""
    users = claimer.reclaim(session)
    if not users:
        return
    for turns in kept:
        turns.expire()  # their users were left out of the kept lists while leased
    log_event(
        logger,
        "embedding.heal.reclaimed",
        logging.WARNING,
        model=model,
        rows=len(users),
        users=sorted(set(users)),
        # A reindex run claims under a lock token as a worker does (retrieval.fill).
        cause="the process that claimed them (a worker of memstrata serve, or a memstrata "
        "reindex run) is gone: it died or stopped, or its database connection ended, before "
        "its lease ran out",
    )


def claim_wrong_length(
    session: Session,
    embedder: OpenAICompatibleEmbedder,
    n: int,
    lease_s: float,
    *,
    users: queue.PendingUsers,
    wrong: queue.WrongLength,
    token: int | None,
) -> list[queue.Claimed]:
    """Up to ``n`` rows with a vector of ``embedder``'s model of a length ``wrong`` says is
    wrong, logged when any are found."""
    found = queue.claim(
        session, embedder.name, n, lease_s, users=users, wrong_length=wrong, claimer=token
    )
    if found:
        log_event(
            logger,
            "embedding.heal.wrong_length",
            logging.WARNING,
            model=embedder.name,
            dimensions=embedder.dimensions,
            rows=len(found),
            users=sorted({c.user_id for c in found}),
        )
    return found
