"""``--help`` shows flags without a value, so nobody types ``--json true``."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperGroup

from memstrata.cli import build_app
from tests.cli.cli_env import run_cli


def _command_paths() -> list[list[str]]:
    """Every command and group of the CLI, as the words that call it."""
    paths: list[list[str]] = [[]]

    def walk(command: object, prefix: list[str]) -> None:
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                paths.append([*prefix, name])
                walk(sub, [*prefix, name])

    walk(typer.main.get_command(build_app()), [])
    return paths


def test_every_command_is_walked() -> None:
    walked = {" ".join(p) for p in _command_paths()}
    assert {"search", "user list", "db status", "bench locomo", "conflicts show"} <= walked


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "memstrata")
def test_help_shows_no_value_for_a_flag(path: list[str]) -> None:
    code, out, _ = run_cli(*path, "--help")
    assert code == 0, out
    assert "<bool>" not in out, out
    assert "list[str]" not in out, out


def test_search_help_names_what_source_takes() -> None:
    code, out, _ = run_cli("search", "--help")
    assert code == 0 and "<source>" in out and "--json " in out
