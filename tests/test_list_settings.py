"""Every setting that takes a JSON list says so, with an example, whatever else it is given.

A JSON object (``MEMSTRATA_EMBEDDING_MODELS='{"name": …}'``: one model, no brackets) got
pydantic's bare "Input should be a valid list", while a value that was not JSON at all got
an example (``memstrata.config_lists``).
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.config_lists import LIST_EXAMPLES
from tests.cli.cli_env import clean_env, run_cli

LIST_SETTINGS = sorted(
    name
    for name, field in Settings.model_fields.items()
    if typing.get_origin(field.annotation) is list
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_LOG_JSON": "false"},
    )


def error_line(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> str:
    """The one line ``memstrata token`` fails with (settings are read first)."""
    monkeypatch.setenv(f"MEMSTRATA_{name.upper()}", value)
    code, _out, err = run_cli("token", "--user", "alice")
    assert code == 1, err
    return err.strip()


def test_every_list_setting_has_an_example() -> None:
    assert len(LIST_SETTINGS) >= 7
    assert sorted(LIST_EXAMPLES) == LIST_SETTINGS


@pytest.mark.parametrize("name", LIST_SETTINGS)
def test_the_example_is_accepted(env: None, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(f"MEMSTRATA_{name.upper()}", LIST_EXAMPLES[name])
    value = getattr(Settings(), name)
    assert isinstance(value, list) and len(value) == len(json.loads(LIST_EXAMPLES[name]))


@pytest.mark.parametrize("name", LIST_SETTINGS)
def test_an_object_gets_the_example(env: None, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    line = error_line(monkeypatch, name, '{"a": "b"}')
    assert line == (
        f"error: invalid configuration — MEMSTRATA_{name.upper()}: must be a JSON list, e.g. "
        f"'{LIST_EXAMPLES[name]}'; got a JSON object; a single entry goes in brackets too"
    )


@pytest.mark.parametrize(
    ("value", "given"),
    [
        ('"HS256"', "a JSON string; a single entry goes in brackets too"),
        ("256", "a JSON number"),
        ("true", "a JSON boolean"),
    ],
)
def test_other_json_values_get_it_too(
    env: None, monkeypatch: pytest.MonkeyPatch, value: str, given: str
) -> None:
    line = error_line(monkeypatch, "jwt_algorithms", value)
    assert line == (
        "error: invalid configuration — MEMSTRATA_JWT_ALGORITHMS: must be a JSON list, e.g. "
        f"'{LIST_EXAMPLES['jwt_algorithms']}'; got {given}"
    )


def test_a_value_that_is_not_json_gets_the_settings_own_example(
    env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = error_line(monkeypatch, "skill_dirs", "/srv/skills")
    assert line.startswith("error: invalid configuration — MEMSTRATA_SKILL_DIRS: not valid JSON")
    assert line.endswith("""list and object settings take JSON, e.g. '["/srv/skills"]'""")


def test_keyword_arguments_are_checked_alike() -> None:
    with pytest.raises(ValidationError, match=r"must be a JSON list, e\.g\. '\[\"/srv/skills"):
        Settings(skill_dirs={"a": "b"})  # type: ignore[arg-type]
    # What pydantic reads as a list still passes: a tuple, a set.
    assert Settings(jwt_algorithms=("HS256",)).jwt_algorithms == ["HS256"]  # type: ignore[arg-type]
    assert Settings(mcp_allowed_hosts={"h:*"}).mcp_allowed_hosts == ["h:*"]  # type: ignore[arg-type]
