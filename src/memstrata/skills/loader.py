"""Skill discovery: one folder per skill, described by the YAML frontmatter of its SKILL.md.

The convention is the common agent-skills one::

    web_search/
      SKILL.md        ---
                      name: web_search
                      description: 搜索互联网
                      description_en: Search the internet   # optional
                      category: builtin      # optional
                      ---
                      instructions for the agent…

``description`` is the spec's (its examples are Chinese); ``description_en``, when a skill
has one, is what a page in English shows instead (the API returns both).

Sources are read in order: the packaged builtin skills (``memstrata.skills.builtin``),
then each configured directory. A later source overrides an earlier one for the same name,
so a deployment can replace a builtin skill by shipping a folder with the same ``name``.
Within one directory the first folder (by folder name) wins and the duplicate is logged.

A broken skill never breaks discovery: unreadable files, invalid YAML, a missing name or
description, or an unusable name are logged as warnings (event ``skills.skipped`` with
the file's path and the reason) and the skill is left out. Nothing is cached; every
``discover()`` reads the folders again, so edits show up without a restart.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import yaml

from memstrata.frontmatter import split_frontmatter
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
BUILTIN_PACKAGE = "memstrata.skills.builtin"
MAX_NAME_LENGTH = 100  # user_skill_configs.skill_name is String(100)


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    category: str
    path: Path  # the SKILL.md file; the skill's other files sit beside it
    description_en: str | None = None


class SkillLoader:
    """Discovers skills in the builtin package and in ``dirs`` (later sources win)."""

    def __init__(self, dirs: Sequence[Path], include_builtin: bool = True) -> None:
        self._dirs = tuple(Path(d) for d in dirs)
        self._include_builtin = include_builtin

    def discover(self) -> list[Skill]:
        """Every valid skill, one per name, sorted by name."""
        by_name: dict[str, Skill] = {}
        for directory, default_category in self._sources():
            for skill in _scan(directory, default_category):
                replaced = by_name.get(skill.name)
                if replaced is not None:
                    log_event(
                        logger,
                        "skills.overridden",
                        name=skill.name,
                        path=str(skill.path),
                        replaced=str(replaced.path),
                    )
                by_name[skill.name] = skill
        return sorted(by_name.values(), key=lambda skill: skill.name)

    def get(self, name: str) -> Skill | None:
        return next((skill for skill in self.discover() if skill.name == name), None)

    def _sources(self) -> Iterator[tuple[Path, str]]:
        if self._include_builtin:
            builtin = builtin_skills_dir()
            if builtin is not None:
                yield builtin, "builtin"
        for directory in self._dirs:
            yield directory, "custom"


def builtin_skills_dir() -> Path | None:
    """The packaged builtin skills folder, or None when the package is not on disk."""
    root = files(BUILTIN_PACKAGE)
    if isinstance(root, Path):
        return root
    # A zipped install has no real directory to hand out as ``Skill.path``.
    _skip(Path(str(root)), "builtin skills are not on the filesystem (zipped install?)")
    return None


def _scan(directory: Path, default_category: str) -> Iterator[Skill]:
    if not directory.is_dir():
        reason = "not a directory" if directory.exists() else "directory does not exist"
        _skip(directory, f"skill directory skipped: {reason}")
        return
    seen: dict[str, Path] = {}
    try:
        folders = sorted(directory.iterdir())
    except OSError as exc:
        _skip(directory, f"cannot list skill directory: {exc.strerror or exc}")
        return
    for folder in folders:
        skill_file = folder / SKILL_FILE
        if folder.name.startswith(".") or not skill_file.is_file():
            continue  # not a skill folder (__pycache__, .git, a README, ...)
        skill = _load(skill_file, default_category)
        if skill is None:
            continue
        if skill.name in seen:
            _skip(skill_file, f"duplicate skill name {skill.name!r}, already in {seen[skill.name]}")
            continue
        seen[skill.name] = skill_file
        yield skill


class _InvalidSkill(Exception):
    """Why one SKILL.md is unusable; caught in :func:`_load` and logged."""


def _load(path: Path, default_category: str) -> Skill | None:
    try:
        return _parse(path, default_category)
    except _InvalidSkill as exc:
        _skip(path, str(exc))
        return None


def _parse(path: Path, default_category: str) -> Skill:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _InvalidSkill(f"not valid UTF-8 (byte offset {exc.start})") from exc
    except OSError as exc:
        raise _InvalidSkill(f"cannot read: {exc.strerror or exc}") from exc
    block, _ = split_frontmatter(text)
    if block is None:
        raise _InvalidSkill("no YAML frontmatter: the file must start with a '---' block")
    try:
        meta = yaml.safe_load(block)
    except yaml.YAMLError as exc:
        raise _InvalidSkill(f"invalid YAML frontmatter: {exc}".replace("\n", " ")) from exc
    if meta is None:
        raise _InvalidSkill("frontmatter is empty; it needs 'name' and 'description'")
    if not isinstance(meta, dict):
        raise _InvalidSkill("frontmatter is not a mapping of keys to values")
    name = _text_field(meta, "name")
    problem = _name_problem(name)
    if problem:
        raise _InvalidSkill(f"unusable skill name {name!r}: {problem}")
    description = _text_field(meta, "description")
    category = _text_field(meta, "category") if "category" in meta else default_category
    english = _text_field(meta, "description_en").strip() if "description_en" in meta else None
    return Skill(
        name=name,
        description=description.strip(),
        category=category.strip(),
        path=path,
        description_en=english,
    )


def _text_field(meta: dict[object, object], key: str) -> str:
    value = meta.get(key)
    if value is None:
        raise _InvalidSkill(f"frontmatter has no '{key}'")
    if not isinstance(value, str):
        raise _InvalidSkill(f"'{key}' must be text, not {type(value).__name__}")
    if not value.strip():
        raise _InvalidSkill(f"'{key}' is blank")
    return value


def _name_problem(name: str) -> str | None:
    # Names are stored (String(100)), used in URLs (PUT /api/config/skills/{name}) and as
    # folder names by the tools that install skills, so they must be one clean path segment.
    if len(name) > MAX_NAME_LENGTH:
        return f"longer than {MAX_NAME_LENGTH} characters"
    if any(char.isspace() for char in name):
        return "contains whitespace"
    if "/" in name or "\\" in name:
        return "contains a slash"
    if name in (".", ".."):
        return "is a relative path"
    if any(unicodedata.category(char).startswith("C") for char in name):
        return "contains control or invisible characters"
    return None


def _skip(path: Path, reason: str) -> None:
    log_event(logger, "skills.skipped", logging.WARNING, path=str(path), reason=reason)
