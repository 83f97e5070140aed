"""The README's library example runs as written (on its own embedded PostgreSQL)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from memstrata.cli import build_app

README = Path(__file__).parents[1] / "README.md"


# What the README's HTTP walkthrough leaves in alice's USER.md, in the same default data
# directory as the library example: "what did I name my puppy?" then found this line
# first with BM25 alone ("name"), above the puppy turn.
AFTER_THE_HTTP_WALKTHROUGH = """
from memstrata.config import Settings
from memstrata.runtime import Memstrata

mem = Memstrata.open(Settings())
mem.store.upsert_memory_file("alice", "user", "# USER.md\\n- Name: Alice")
mem.close()
"""
# A line the example's search loop prints for a hit: its score, then its path.
HIT_LINE = re.compile(r"^\d\.\d+ (\S+) \{")


def _run(script: Path, code: str, env: dict[str, str]) -> str:
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_library_example_runs(tmp_path: Path) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env |= {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_LOG_LEVEL": "WARNING"}
    _run(tmp_path / "walkthrough.py", AFTER_THE_HTTP_WALKTHROUGH, env)
    out = _run(tmp_path / "example.py", example, env)
    assert "Likes oolong tea" in out
    # The search finds the puppy turn first, with no embedding API (BM25 only).
    hits = [line for line in out.splitlines() if HIT_LINE.match(line)]
    assert hits and "I adopted a puppy named Biscuit" in hits[0], out
    assert "Recorded in MEMORY.md" in out


# Options Typer adds to every command or to the root, which the README leaves to --help.
TYPERS_OWN = frozenset({"help", "install_completion", "show_completion"})


def _commands() -> dict[tuple[str, ...], Any]:
    """Every command of the CLI by its words (the root is ``()``)."""
    found: dict[tuple[str, ...], Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        found[path] = command
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(build_app()), ())
    return found


def _readme_synopses() -> list[str]:
    """The ``memstrata …`` synopses of the README's command table, one per command."""
    text = README.read_text(encoding="utf-8")
    cells = re.findall(r"^\| (`memstrata .*?`(?: / `[^`]*`)*) \|", text, re.M)
    return [s.removeprefix("memstrata ") for c in cells for s in re.findall(r"`([^`]*)`", c)]


def test_the_command_table_agrees_with_help() -> None:
    """Each README synopsis shows exactly the options `--help` lists, and a value it shows
    for an option with a default is that default ([-k 5] said 5 where the default is 10)."""
    commands = _commands()
    seen = set()
    for synopsis in _readme_synopses():
        words = synopsis.split()
        path: tuple[str, ...] = ()
        while words and (*path, words[0]) in commands:
            path = (*path, words.pop(0))
        seen.add(path)
        options = {
            o: p for p in commands[path].params if p.param_type_name == "option" for o in p.opts
        }
        shown = {}
        for at, word in enumerate(words):
            name = word.strip("[]")
            if name.startswith("-"):
                assert name in options, f"README: `{synopsis}` shows {name}, --help has none"
                nxt = words[at + 1] if at + 1 < len(words) else ""
                shown[options[name].name] = None if nxt.startswith(("-", "[")) else nxt
        wanted = {p.name for p in options.values() if p.name not in TYPERS_OWN}
        assert set(shown) == wanted, f"README: `{synopsis}` lacks {wanted - set(shown)}"
        for param in options.values():
            value = (shown.get(param.name) or "").rstrip("]")
            literal = value and not value.isupper() and param.default not in (None, False)
            assert not literal or value == str(param.default), (
                f"README: `{synopsis}` shows {param.name} {value}, the default is {param.default}"
            )
    assert seen == {p for p, c in commands.items() if not hasattr(c, "commands")} | {()}
