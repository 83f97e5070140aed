"""Per-user skill configuration: what the SkillLoader discovers, merged with the user's rows.

Spec §3: ``GET /api/config/skills`` merges the discovered skills with ``user_skill_configs``;
a skill the user never toggled is enabled (the column's default). Rows for skills that are
no longer discovered are kept (the skill may come back) but never listed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import InvalidContentError, UnknownSkillError
from memstrata.logs import log_event
from memstrata.skills.loader import Skill
from memstrata.skills.repository import UserSkillConfigRepository
from memstrata.text import shortened

logger = logging.getLogger(__name__)

# An unknown skill's refusal lists this many installed skills, and cuts the name sent here.
_LISTED_SKILLS = 20
_SHOWN_NAME_CHARS = 100


class SkillSource(Protocol):
    """What the service needs from :class:`~memstrata.skills.loader.SkillLoader`."""

    def discover(self) -> list[Skill]: ...


@dataclass(frozen=True)
class UserSkill:
    name: str
    description: str
    category: str
    enabled: bool
    description_en: str | None = None


class SkillService:
    def __init__(self, loader: SkillSource, sessions: sessionmaker[Session]) -> None:
        self._loader = loader
        self._sessions = sessions

    def list_for_user(self, user_id: str) -> list[UserSkill]:
        """Every discovered skill (sorted by name) with this user's switch; default enabled."""
        skills = self._loader.discover()
        with self._sessions() as session:
            enabled = UserSkillConfigRepository(session, user_id).enabled_by_name()
        return [_user_skill(skill, enabled.get(skill.name, True)) for skill in skills]

    def set_enabled(self, user_id: str, name: str, enabled: bool) -> UserSkill:
        """Turn one skill on or off for one user; ``UnknownSkillError`` if none has that name,
        ``InvalidContentError`` unless ``enabled`` is a bool (``"no"`` would be stored as
        true, ``None`` would fail in the database)."""
        if not isinstance(enabled, bool):
            raise InvalidContentError(
                f"enabled must be True or False, got {enabled!r}", field="enabled"
            )
        skills = self._loader.discover()
        skill = next((s for s in skills if s.name == name), None)
        if skill is None:
            raise UnknownSkillError(unknown_skill_message(name, [s.name for s in skills]))
        with transaction(self._sessions) as session:
            stored = UserSkillConfigRepository(session, user_id).set_enabled(name, enabled)
        log_event(logger, "skills.toggled", user_id=user_id, skill=name, enabled=stored)
        return _user_skill(skill, stored)


def unknown_skill_message(name: object, installed: list[str]) -> str:
    """No skill is ``name``: the installed ones, by name (a transport may add how it lists
    them); a long ``name`` cut, as the caller sent it whole."""
    shown = shortened(name, _SHOWN_NAME_CHARS) if isinstance(name, str) else name
    if not installed:
        return f"no skill named {shown!r}; no skills are installed"
    listed = ", ".join(installed[:_LISTED_SKILLS])
    if len(installed) > _LISTED_SKILLS:
        listed += f" and {len(installed) - _LISTED_SKILLS} more"
    return f"no skill named {shown!r}; installed skills: {listed}"


def _user_skill(skill: Skill, enabled: bool) -> UserSkill:
    return UserSkill(skill.name, skill.description, skill.category, enabled, skill.description_en)
