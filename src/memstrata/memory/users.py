"""The users memstrata holds anything of, with how much: an operator's view
(``memstrata user list``). The one read across users; every other query is scoped to one
user by its repository."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

# One pass over each per-user table (each has an index on user_id). A user whose rows were
# all erased keeps only a memory_index_state row (memory.erase) and is not listed.
_USERS = text(
    """
    WITH f AS (SELECT user_id, count(*) AS n FROM user_memory GROUP BY user_id),
         r AS (SELECT user_id, count(*) AS n FROM memory_embeddings GROUP BY user_id),
         s AS (SELECT user_id, count(*) AS n FROM user_skill_configs GROUP BY user_id)
    SELECT COALESCE(f.user_id, r.user_id, s.user_id) AS user_id,
           COALESCE(f.n, 0), COALESCE(r.n, 0), COALESCE(s.n, 0)
    FROM f
    FULL JOIN r ON r.user_id = f.user_id
    FULL JOIN s ON s.user_id = COALESCE(f.user_id, r.user_id)
    ORDER BY 1
    """
)


@dataclass(frozen=True)
class UserSummary:
    user_id: str
    files: int  # rows in user_memory
    rows: int  # search rows in memory_embeddings (memory-file chunks and conversation turns)
    skills: int  # skill switches in user_skill_configs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_users(session: Session) -> list[UserSummary]:
    """Every user with a memory file, a search row or a skill switch, by id."""
    return [
        UserSummary(str(user_id), int(files), int(rows), int(skills))
        for user_id, files, rows, skills in session.execute(_USERS).all()
    ]


# Index lookups, not list_users' pass over every user: is ``user_id`` one of them?
_HOLDS_ANYTHING = text(
    """
    SELECT EXISTS (SELECT 1 FROM user_memory WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM memory_embeddings WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM user_skill_configs WHERE user_id = :user)
    """
)


def holds_anything(session: Session, user_id: str) -> bool:
    """Whether ``list_users`` would list ``user_id``: a memory file, a search row or a
    skill switch of it is stored (a mistyped id holds none)."""
    return bool(session.execute(_HOLDS_ANYTHING, {"user": user_id}).scalar())
