"""SkillService against the real database: discovery merged with per-user rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from memstrata.db.database import Database
from memstrata.db.models import UserSkillConfig
from memstrata.errors import InvalidContentError, InvalidUserIdError, UnknownSkillError
from memstrata.skills.loader import SkillLoader
from memstrata.skills.service import SkillService, UserSkill


def _write_skill(root: Path, folder: str, name: str, description: str, category: str) -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\ncategory: {category}\n---\nbody\n",
        encoding="utf-8",
    )


@pytest.fixture
def service(db: Database, tmp_path: Path) -> SkillService:
    root = tmp_path / "skills"
    _write_skill(root, "a", "alpha", "first skill", "custom")
    _write_skill(root, "b", "beta", "second skill", "tools")
    return SkillService(SkillLoader([root], include_builtin=False), db.sessions)


def test_untoggled_skills_are_enabled(service: SkillService) -> None:
    assert service.list_for_user("alice") == [
        UserSkill("alpha", "first skill", "custom", True),
        UserSkill("beta", "second skill", "tools", True),
    ]


def test_set_enabled_is_per_user_and_upserts(service: SkillService, db: Database) -> None:
    assert service.set_enabled("alice", "beta", False) == UserSkill(
        "beta", "second skill", "tools", False
    )
    service.set_enabled("alice", "beta", False)  # same value twice: still one row
    assert [s.enabled for s in service.list_for_user("alice")] == [True, False]
    assert [s.enabled for s in service.list_for_user("bob")] == [True, True]

    service.set_enabled("alice", "beta", True)
    assert [s.enabled for s in service.list_for_user("alice")] == [True, True]
    with db.sessions() as session:
        rows = session.execute(
            select(UserSkillConfig.user_id, UserSkillConfig.skill_name, UserSkillConfig.enabled)
        ).all()
    assert [tuple(r) for r in rows] == [("alice", "beta", True)]


def test_unknown_skill_is_refused_and_not_stored(service: SkillService, db: Database) -> None:
    with pytest.raises(UnknownSkillError, match="no skill named 'gamma'"):
        service.set_enabled("alice", "gamma", True)
    with db.sessions() as session:
        assert session.scalars(select(UserSkillConfig)).all() == []


@pytest.mark.parametrize("enabled", ["no", None, 0, 1])
def test_enabled_that_is_no_bool_is_refused_and_not_stored(
    service: SkillService, db: Database, enabled: object
) -> None:
    """A library caller's ``"no"`` was stored as true, ``None`` failed in the database
    with the row in the error, 0 and 1 passed as booleans."""
    with pytest.raises(InvalidContentError, match="enabled must be True or False"):
        service.set_enabled("alice", "beta", enabled)  # type: ignore[arg-type]
    with db.sessions() as session:
        assert session.scalars(select(UserSkillConfig)).all() == []


def test_rows_of_vanished_skills_are_not_listed(
    service: SkillService, db: Database, tmp_path: Path
) -> None:
    service.set_enabled("alice", "alpha", False)
    only_beta = tmp_path / "only-beta"
    _write_skill(only_beta, "b", "beta", "second skill", "tools")
    narrower = SkillService(SkillLoader([only_beta], include_builtin=False), db.sessions)
    assert narrower.list_for_user("alice") == [UserSkill("beta", "second skill", "tools", True)]
    # The row survives; when the skill comes back, so does the user's choice.
    assert service.list_for_user("alice")[0].enabled is False


def test_builtin_skills_are_listed(db: Database) -> None:
    names = {s.name: s for s in SkillService(SkillLoader([]), db.sessions).list_for_user("u")}
    assert names["web_search"] == UserSkill(
        "web_search", "搜索互联网", "builtin", True, "Search the internet"
    )


@pytest.mark.parametrize("user_id", ["", "x" * 101])
def test_bad_user_ids_are_refused(service: SkillService, user_id: str) -> None:
    with pytest.raises(InvalidUserIdError):
        service.list_for_user(user_id)
    with pytest.raises(InvalidUserIdError):
        service.set_enabled(user_id, "alpha", True)
