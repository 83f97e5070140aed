"""SQL for ``user_skill_configs``, scoped to one user at construction: no query can forget it."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from memstrata.db.models import UserSkillConfig
from memstrata.memory.kinds import validate_user_id


class UserSkillConfigRepository:
    """One user's skill switches. Methods use the caller's session; the caller commits."""

    def __init__(self, session: Session, user_id: str) -> None:
        self.session = session
        self.user_id = validate_user_id(user_id)

    def enabled_by_name(self) -> dict[str, bool]:
        """``{skill_name: enabled}`` for this user's rows (untoggled skills are absent)."""
        rows = self.session.execute(
            select(UserSkillConfig.skill_name, UserSkillConfig.enabled).where(
                UserSkillConfig.user_id == self.user_id
            )
        )
        return {name: enabled for name, enabled in rows}

    def set_enabled(self, skill_name: str, enabled: bool) -> bool:
        """Insert or update the user's row for ``skill_name``; returns the stored value."""
        stmt = insert(UserSkillConfig).values(
            user_id=self.user_id, skill_name=skill_name, enabled=enabled
        )
        upsert = stmt.on_conflict_do_update(
            constraint="uq_user_skill_configs_user_skill",
            set_={"enabled": stmt.excluded.enabled, "updated_at": func.now()},
        ).returning(UserSkillConfig.enabled)
        stored = self.session.scalar(upsert)
        assert stored is not None  # an upsert always returns its row
        return bool(stored)

    def delete_all(self) -> int:
        """Delete every switch of the user (an erasure, ``memory.erase``); how many went."""
        deleted = self.session.scalars(
            delete(UserSkillConfig)
            .where(UserSkillConfig.user_id == self.user_id)
            .returning(UserSkillConfig.id)
        ).all()
        return len(deleted)
