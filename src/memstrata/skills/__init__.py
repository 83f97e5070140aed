"""Skills: packaged and deployment-provided agent skills (one folder with a SKILL.md each)."""

from memstrata.skills.loader import Skill, SkillLoader, builtin_skills_dir

__all__ = ["Skill", "SkillLoader", "builtin_skills_dir"]
