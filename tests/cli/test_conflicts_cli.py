"""`memstrata conflicts list|show|dismiss` through Typer's runner, on the test database and
a real sandbox root: the agents' kept-aside copies, made by a real sync conflict or
written into the sandbox as sync names them (for paging and the name checks)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memstrata.api.errors import INVALID_FILE_NAME_MESSAGE as INVALID_FILE
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.state import CONFLICT_DIR
from tests.api.test_conflicts import AGENT, BASE, HUMAN, NAME, plant, sandbox_dir, stamp
from tests.cli.cli_env import run_cli

LISTED_BY = "`memstrata conflicts list --user alice`"
SESSION = "chat 7"  # a session directory with an escape: chat%207


@pytest.fixture
def env(db: Database, boxes: Path) -> Settings:
    """The settings the CLI reads from the environment ``boxes`` set."""
    return Settings()


def real_conflict(env: Settings, db: Database, user: str) -> str:
    """The agent edits a line of MEMORY.md in its sandbox; the user edits the same line
    before it is read back: the stored version wins and the agent's copy is kept aside."""
    mem = Memstrata.open(env, database=db, embedder=None)
    try:
        first = asyncio.run(mem.sync.frontend_edit(user, FileKind.MEMORY, BASE))
        (sandbox_dir(env, user) / "MEMORY.md").write_text(AGENT)  # the agent's shell
        asyncio.run(mem.sync.frontend_edit(user, FileKind.MEMORY, HUMAN, first.version))
    finally:
        mem.pool.close()  # the shared database stays up
    [copy] = (sandbox_dir(env, user) / CONFLICT_DIR).iterdir()
    return copy.name


def test_a_real_conflict_is_listed_shown_and_dismissed(env: Settings, db: Database) -> None:
    name = real_conflict(env, db, "alice")

    code, out, err = run_cli("conflicts", "list", "--user", "alice")
    assert (code, err) == (0, "")
    header, row, *preview, footer = out.splitlines()
    assert header.split() == ["name", "file", "reason", "saved", "at", "(UTC)", "bytes"]
    assert row.split()[:3] == [name, "memory", "conflict"]
    assert row.split()[-1] == str(len(AGENT.encode()))
    assert preview == ["    | # MEMORY", "    | - likes tea", "    | - lives in Marseille"]
    assert footer == "copies 1-1 of 1, newest first"

    code, out, err = run_cli("conflicts", "list", "--user", "alice", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert [c["name"] for c in body["conflicts"]] == [name]
    assert (body["total"], body["next_offset"], body["sandbox"]) == (1, None, "ok")

    code, out, err = run_cli("conflicts", "show", "--user", "alice", name)
    assert (code, out) == (0, AGENT)  # exactly the agent's text, for a redirect to a file
    assert err.startswith("MEMORY.md kept aside at ")
    assert f"(it conflicted with a human's edit; the stored version won), {len(AGENT)} bytes" in err
    code, out, _ = run_cli("conflicts", "show", "--user", "alice", name, "--json")
    assert (code, json.loads(out)["content"], json.loads(out)["undecodable"]) == (0, AGENT, False)

    code, out, err = run_cli("conflicts", "dismiss", "--user", "alice", name)
    assert (code, out, err) == (0, f"dismissed {name}\n", "")
    assert not (sandbox_dir(env, "alice") / CONFLICT_DIR / name).exists()
    code, out, err = run_cli("conflicts", "dismiss", "--user", "alice", name, "--json")
    assert (code, out) == (1, "")
    assert err == (
        f"error: no kept-aside copy named {name!r}: it was dismissed already, or never kept; "
        f"{LISTED_BY} lists the copies there are\n"
    )
    assert (
        run_cli("conflicts", "list", "--user", "alice")[1] == "no kept-aside copies for 'alice'\n"
    )


def test_list_pages_newest_first_like_the_service(env: Settings) -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    memory = [f"MEMORY.md.{stamp(start + timedelta(minutes=n))}.md" for n in range(5)]
    for n, name in enumerate(memory):
        plant(env, "alice", name, f"copy {n}\n")
    rejected = f"USER.md.{stamp(start + timedelta(days=1))}.rejected.md"
    plant(env, "alice", rejected, "- caf\xe9\n".encode("latin-1"), session=SESSION)
    newest = [f"sessions/{safe_dir_name(SESSION)}/{rejected}", *memory[::-1]]

    def page(*options: str) -> dict[str, Any]:
        code, out, err = run_cli("conflicts", "list", "--user", "alice", "--json", *options)
        assert code == 0, err
        return dict(json.loads(out))

    first = page("--limit", "2")
    assert [c["name"] for c in first["conflicts"]] == newest[:2]
    assert (first["total"], first["next_offset"]) == (6, 2)
    second = page("--limit", "2", "--offset", "2")
    assert [c["name"] for c in second["conflicts"]] == newest[2:4]
    last = page("--limit", "2", "--offset", "4")
    assert (last["next_offset"], len(last["conflicts"])) == (None, 2)
    users = page("--file", "user")
    assert [(c["reason"], c["session_dir"]) for c in users["conflicts"]] == [
        ("rejected", safe_dir_name(SESSION))
    ]

    code, out, _ = run_cli("conflicts", "list", "--user", "alice", "--limit", "2")
    assert out.splitlines()[-1] == "copies 1-2 of 6, newest first; next page: --offset 2"
    code, out, _ = run_cli("conflicts", "list", "--user", "alice", "--offset", "9")
    assert (code, out) == (0, "no copies past offset 9: 'alice' has 6\n")
    code, out, _ = run_cli("conflicts", "list", "--user", "alice", "--file", "soul")
    assert (code, out) == (0, "no kept-aside copies of SOUL.md for 'alice'\n")

    code, out, err = run_cli("conflicts", "show", "--user", "alice", newest[0])
    assert (code, out) == (0, "- caf\ufffd\n")
    assert (
        f"in session sandbox {safe_dir_name(SESSION)!r}" in err and "(the database refused" in err
    )
    assert err.rstrip().endswith("7 bytes; not UTF-8 text: bytes that do not decode show as U+FFFD")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "..",
        "../USER.md",
        f"../{NAME}",
        f"../bob/{CONFLICT_DIR}/{NAME}",
        f"{CONFLICT_DIR}/{NAME}",
        f"/{NAME}",
        f"sessions/../{NAME}",
        f"sessions/a/b/{NAME}",
        "MEMORY.md",
        NAME.replace("MEMORY", "AGENTS"),
        NAME.replace("20260301", "20261301"),  # month 13
        NAME.replace(".md", ".txt"),
        NAME + "\n",
        "x" * 5000,
    ],
)
@pytest.mark.parametrize("command", ["show", "dismiss"])
def test_a_name_that_is_not_a_copys_is_refused_naming_it(
    env: Settings, name: str, command: str
) -> None:
    plant(env, "alice", NAME, AGENT)
    plant(env, "bob", NAME, AGENT)
    code, out, err = run_cli("conflicts", command, "--user", "alice", name)
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    shown = " ".join(repr(name[:80]).split())  # print_error keeps the message on one line
    assert line == (
        f"error: {shown} is not the name of a kept-aside copy: names are as {LISTED_BY} "
        "lists them, such as 'MEMORY.md.20260301T120000.123456Z.md'"
    )
    assert (sandbox_dir(env, "alice") / CONFLICT_DIR / NAME).exists()
    assert (sandbox_dir(env, "bob") / CONFLICT_DIR / NAME).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--user", ""], "user_id must be a non-empty string"),
        (["show", "--user", " ", NAME], "user_id must be a non-empty string"),
        (["dismiss", "--user", "u" * 101, NAME], "user_id is longer than 100 characters"),
        (["list", "--user", "alice", "--limit", "0"], "limit must be from 1 to 50, got 0"),
        (["list", "--user", "alice", "--limit", "51"], "limit must be from 1 to 50, got 51"),
        (["list", "--user", "alice", "--offset", "-1"], "offset must be 0 or more, got -1"),
        (  # REST's and MCP's bound: an offset fits an integer column
            ["list", "--user", "alice", "--offset", "2147483648"],
            "offset must be from 0 to 2147483647, got 2147483648",
        ),
        (["list", "--user", "alice", "--file", "diary"], f"{INVALID_FILE} (--file 'diary')"),
        (["list", "--user", "alice", "--file", "agents"], f"{INVALID_FILE} (--file 'agents')"),
    ],
)
def test_bad_input_is_one_line_and_status_1(env: Settings, args: list[str], message: str) -> None:
    code, out, err = run_cli("conflicts", *args)
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert line.startswith("error: ") and message in line, line


def test_an_absent_copy_and_another_users_copy_are_not_found(env: Settings) -> None:
    plant(env, "bob", NAME, AGENT)
    for command in ("show", "dismiss"):
        code, out, err = run_cli("conflicts", command, "--user", "alice", NAME)
        assert (code, out) == (1, "")
        assert err.startswith(f"error: no kept-aside copy named {NAME!r}: ")
    assert (
        run_cli("conflicts", "list", "--user", "alice")[1] == "no kept-aside copies for 'alice'\n"
    )
    assert (sandbox_dir(env, "bob") / CONFLICT_DIR / NAME).exists()


def test_a_sandbox_that_fails_says_so(env: Settings, tmp_path: Path) -> None:
    """A user directory that is a symbolic link is refused by every sandbox operation
    (it could lead into another user's files): the sandbox fails, for real."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / CONFLICT_DIR).mkdir(parents=True)
    (elsewhere / CONFLICT_DIR / NAME).write_text(AGENT)
    sandbox_dir(env, "alice").parent.mkdir(parents=True, exist_ok=True)
    sandbox_dir(env, "alice").symlink_to(elsewhere)

    code, out, err = run_cli("conflicts", "list", "--user", "alice")
    assert (code, out) == (1, "")  # not "no kept-aside copies": nothing could be said
    *logged, line = err.splitlines()  # the log's WARNING says why, the error what it means
    assert line == (
        "error: the sandbox could not be listed (SandboxPathError): kept-aside copies cannot "
        "be shown; try again later"
    )
    assert [json.loads(entry)["event"] for entry in logged] == ["conflicts.sandbox_failed"]
    assert "is a symlink" in logged[0]
    code, out, err = run_cli("conflicts", "list", "--user", "alice", "--json")
    assert code == 1 and json.loads(out)["sandbox"] == "sandbox_failed"
    code, out, err = run_cli("conflicts", "show", "--user", "alice", NAME)
    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == (
        "error: the copy could not be read from the sandbox (SandboxPathError); try again later"
    )
    code, out, err = run_cli("conflicts", "dismiss", "--user", "alice", NAME)
    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == (
        "error: the copy could not be dismissed: the sandbox failed (SandboxPathError); "
        "try again later"
    )
    assert (elsewhere / CONFLICT_DIR / NAME).exists()
