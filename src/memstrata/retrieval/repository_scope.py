"""What every part of ``EmbeddingRepository`` shares: one session and one validated user.

Each part (``repository_reads``, ``repository_writes``, ``repository_state``) adds the
user's filter to every statement itself, so none of them can be built for no user or reach
another user's rows.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from memstrata.memory.kinds import validate_user_id


class UserScoped:
    def __init__(self, session: Session, user_id: str) -> None:
        self.session = session
        self.user_id = validate_user_id(user_id)
