"""SkillLoader: discovery, override order, and broken skills skipped with a warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memstrata.logs import event_fields
from memstrata.skills import Skill, SkillLoader, builtin_skills_dir

BUILTIN_NAMES = ["code_interpreter", "file_manager", "memory_search", "web_search"]


def write_skill(root: Path, folder: str, text: str | bytes) -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def frontmatter(**fields: str) -> str:
    lines = "".join(f"{key}: {value}\n" for key, value in fields.items())
    return f"---\n{lines}---\n# Instructions\n"


def skipped(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """path -> reason for every ``skills.skipped`` warning."""
    return {
        event_fields(r)["path"]: event_fields(r)["reason"]
        for r in caplog.records
        if r.levelno == logging.WARNING and event_fields(r).get("event") == "skills.skipped"
    }


def test_builtin_skills(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    skills = SkillLoader([]).discover()
    assert [s.name for s in skills] == BUILTIN_NAMES
    web = SkillLoader([]).get("web_search")
    assert web is not None
    assert (web.name, web.description, web.category) == ("web_search", "搜索互联网", "builtin")
    assert web.path.name == "SKILL.md" and web.path.parent.name == "web_search"
    assert all(s.category == "builtin" for s in skills)
    assert skipped(caplog) == {}


def test_builtin_skills_live_inside_the_package() -> None:
    # Hatchling packs everything under src/memstrata into the wheel, so this is enough.
    directory = builtin_skills_dir()
    assert directory is not None
    assert directory.parent.name == "skills" and directory.parent.parent.name == "memstrata"
    for name in BUILTIN_NAMES:
        body = (directory / name / "SKILL.md").read_text(encoding="utf-8")
        assert body.startswith(f"---\nname: {name}\n")
        assert len(body) > 800  # real instructions, not a stub


def test_discovers_custom_skills_sorted_with_default_category(tmp_path: Path) -> None:
    write_skill(tmp_path, "zeta", frontmatter(name="zeta", description="Last one"))
    write_skill(tmp_path, "alpha", frontmatter(name="alpha", description="First", category="ops"))
    (tmp_path / "not-a-skill").mkdir()
    (tmp_path / "README.md").write_text("loose file")
    write_skill(tmp_path, ".hidden", frontmatter(name="hidden", description="ignored"))
    skills = SkillLoader([tmp_path], include_builtin=False).discover()
    assert skills == [
        Skill("alpha", "First", "ops", tmp_path / "alpha" / "SKILL.md"),
        Skill("zeta", "Last one", "custom", tmp_path / "zeta" / "SKILL.md"),
    ]


def test_later_directories_override_earlier_ones(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_skill(first, "tool", frontmatter(name="tool", description="from first"))
    write_skill(first, "only_first", frontmatter(name="only_first", description="kept"))
    write_skill(second, "tool-v2", frontmatter(name="tool", description="from second"))
    write_skill(second, "web", frontmatter(name="web_search", description="Company search"))
    loader = SkillLoader([first, second])
    by_name = {s.name: s for s in loader.discover()}
    assert sorted(by_name) == sorted([*BUILTIN_NAMES, "only_first", "tool"])
    assert by_name["tool"].description == "from second"
    assert by_name["tool"].path == second / "tool-v2" / "SKILL.md"
    assert by_name["web_search"] == Skill(
        "web_search", "Company search", "custom", second / "web" / "SKILL.md"
    )
    assert loader.get("only_first") == by_name["only_first"]
    assert loader.get("missing") is None


def test_duplicate_names_in_one_directory_keep_the_first_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(tmp_path, "a", frontmatter(name="dup", description="first"))
    second = write_skill(tmp_path, "b", frontmatter(name="dup", description="second"))
    skills = SkillLoader([tmp_path], include_builtin=False).discover()
    assert [s.description for s in skills] == ["first"]
    assert skipped(caplog) == {
        str(second): f"duplicate skill name 'dup', already in {tmp_path / 'a' / 'SKILL.md'}"
    }


BAD_SKILLS: dict[str, tuple[str | bytes, str]] = {
    "invalid_yaml": ("---\nname: [unclosed\ndescription: x\n---\n", "invalid YAML frontmatter"),
    "no_frontmatter": ("# Just a heading\n", "no YAML frontmatter"),
    "unterminated": ("---\nname: x\ndescription: y\n", "no YAML frontmatter"),
    "not_mapping": ("---\n- name\n- description\n---\n", "frontmatter is not a mapping"),
    "scalar": ("---\njust text\n---\n", "frontmatter is not a mapping"),
    "empty": ("---\n---\nbody\n", "frontmatter is empty"),
    "no_name": (frontmatter(description="x"), "frontmatter has no 'name'"),
    "numeric_name": (frontmatter(name="42", description="x"), "'name' must be text, not int"),
    "no_description": (frontmatter(name="nodesc"), "frontmatter has no 'description'"),
    "blank_description": (frontmatter(name="blank", description='"  "'), "'description' is blank"),
    "space_name": (frontmatter(name='"web search"', description="x"), "contains whitespace"),
    "slash_name": (frontmatter(name="a/b", description="x"), "contains a slash"),
    "backslash_name": (frontmatter(name='"a\\\\b"', description="x"), "contains a slash"),
    "dotdot_name": (frontmatter(name="..", description="x"), "is a relative path"),
    "long_name": (frontmatter(name="n" * 101, description="x"), "longer than 100 characters"),
    "bad_category": (
        frontmatter(name="cat", description="x", category="[1]"),
        "'category' must be text, not list",
    ),
    "latin1": ("---\nname: caf\xe9\ndescription: x\n---\n".encode("latin-1"), "not valid UTF-8"),
}


def test_bad_skills_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for folder, (text, _) in BAD_SKILLS.items():
        write_skill(tmp_path, folder, text)
    good = write_skill(tmp_path, "good", frontmatter(name="good", description="works"))
    caplog.set_level(logging.WARNING)
    skills = SkillLoader([tmp_path], include_builtin=False).discover()
    assert skills == [Skill("good", "works", "custom", good)]
    reasons = skipped(caplog)
    assert sorted(reasons) == sorted(str(tmp_path / f / "SKILL.md") for f in BAD_SKILLS)
    for folder, (_, expected) in BAD_SKILLS.items():
        assert expected in reasons[str(tmp_path / folder / "SKILL.md")], folder


def test_frontmatter_variants_that_are_accepted(tmp_path: Path) -> None:
    write_skill(tmp_path, "bom", "\ufeff---\nname: bom\ndescription: with BOM\n---\n")
    write_skill(tmp_path, "crlf", "---\r\nname: crlf\r\ndescription: Windows\r\n---\r\nbody")
    write_skill(
        tmp_path,
        "folded",
        "---\nname: 搜索\ndescription: >\n  spans\n  two lines\nlicense: MIT\n...\nbody\n",
    )
    skills = SkillLoader([tmp_path], include_builtin=False).discover()
    assert [(s.name, s.description) for s in skills] == [
        ("bom", "with BOM"),
        ("crlf", "Windows"),
        ("搜索", "spans two lines"),
    ]


def test_missing_directories_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    loader = SkillLoader([tmp_path / "nowhere", a_file])
    assert [s.name for s in loader.discover()] == BUILTIN_NAMES
    assert skipped(caplog) == {
        str(tmp_path / "nowhere"): "skill directory skipped: directory does not exist",
        str(a_file): "skill directory skipped: not a directory",
    }


def test_edits_show_up_on_the_next_discover(tmp_path: Path) -> None:
    loader = SkillLoader([tmp_path], include_builtin=False)
    assert loader.discover() == []
    write_skill(tmp_path, "new", frontmatter(name="new", description="added later"))
    assert [s.name for s in loader.discover()] == ["new"]


def test_an_english_description_is_read_beside_the_description(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the builtin ones keep the spec's Chinese description and carry an English one
    english = {s.name: (s.description, s.description_en) for s in SkillLoader([]).discover()}
    assert english["web_search"] == ("搜索互联网", "Search the internet")
    assert all(en for _, en in english.values())
    write_skill(tmp_path, "plain", frontmatter(name="plain", description="只有中文"))
    write_skill(
        tmp_path, "both", frontmatter(name="both", description="两种", description_en=" Both ")
    )
    write_skill(tmp_path, "blank", frontmatter(name="blank", description="x", description_en="''"))
    write_skill(
        tmp_path, "listed", frontmatter(name="listed", description="x", description_en="[a]")
    )
    caplog.set_level(logging.WARNING)
    found = {
        s.name: s.description_en for s in SkillLoader([tmp_path], include_builtin=False).discover()
    }
    assert found == {"plain": None, "both": "Both"}
    assert skipped(caplog) == {
        str(tmp_path / "blank" / "SKILL.md"): "'description_en' is blank",
        str(tmp_path / "listed" / "SKILL.md"): "'description_en' must be text, not list",
    }
