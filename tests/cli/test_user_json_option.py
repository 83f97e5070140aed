"""Every command that takes `--user` takes `--user-json` instead, with one rule.

`memstrata user list` shows an id that does not show as it is (a zero-width space, a bidi
control) as a JSON string, and only `user erase` took that form back: such a user could be
listed and erased but not searched, re-indexed, served over MCP, given a token or have
their kept-aside copies listed. Now each of those commands takes `--user-json` beside
`--user` (``cli.user_ids.chosen_user``): exactly one of the two, the same messages and
exit status 2 as a bad option, before anything is opened.
"""

from __future__ import annotations

import json
from pathlib import Path

import jwt
import pytest

from memstrata.db.database import Database
from memstrata.retrieval.indexer import Indexer
from tests.cli.cli_env import clean_env, run_cli

# Nothing listens on port 1: a command that opened the database would fail on it.
NO_DATABASE = "postgresql://nobody@127.0.0.1:1/none"
SECRET = "k" * 40
# Each command that takes a user, with the arguments it needs besides.
COMMANDS = {
    "search": ["search", "blue door"],
    "reindex": ["reindex"],
    "conflicts list": ["conflicts", "list"],
    "conflicts show": ["conflicts", "show", "memory.20260101-000000-000000.md"],
    "conflicts dismiss": ["conflicts", "dismiss", "memory.20260101-000000-000000.md"],
    "mcp": ["mcp"],
    "token": ["token"],
    "user erase": ["user", "erase", "--yes"],
}
NOT_JSON = (
    "--user-json takes the id as a JSON string, quotes included, as `memstrata user list` "
    "shows an escaped one: e.g. '\"bob\\u200b\"'"
)
# What each wrong use of the pair gets, from every command alike.
WRONG = {
    "both": (["--user", "bob", "--user-json", '"bob"'], "give --user or --user-json, not both"),
    "neither": (
        [],
        "Missing option '--user': give --user ID, or --user-json '\"ID\"' as `memstrata user "
        "list` shows it",
    ),
    "bad JSON": (["--user-json", "a\\u202eb"], NOT_JSON),
    "not closed": (["--user-json", '"bob'], NOT_JSON),
    "a list": (["--user-json", '["bob"]'], NOT_JSON),
    "a number": (["--user-json", "7"], NOT_JSON),
    "null": (["--user-json", "null"], NOT_JSON),
}


@pytest.fixture
def nothing_to_open(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment whose database cannot be reached; the sandbox root is returned."""
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATABASE_URL": NO_DATABASE,
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_SANDBOX_ROOT": str(tmp_path / "boxes"),
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
            "MEMSTRATA_JWT_SECRET": SECRET,
        },
    )
    return tmp_path / "boxes"


@pytest.mark.parametrize("wrong", list(WRONG))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_refuses_a_wrong_pair_alike_before_opening_anything(
    nothing_to_open: Path, command: str, wrong: str
) -> None:
    args, message = WRONG[wrong]
    code, out, err = run_cli(*COMMANDS[command], *args)
    assert (code, out) == (2, ""), err
    assert err.strip().splitlines() == [f"error: {message}"]


def test_token_is_for_the_id_the_json_gives(nothing_to_open: Path) -> None:
    code, out, err = run_cli("token", "--user-json", '"a\\u00a0b"')
    assert code == 0, err
    assert jwt.decode(out.strip(), SECRET, algorithms=["HS256"])["sub"] == "a\u00a0b"


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("token", "error: --user-json: "),
        ("mcp", "error: --user-json: "),
        ("search", "error: "),
        ("conflicts list", "error: "),
        ("conflicts show", "error: "),
    ],
)
def test_the_id_the_json_gives_is_checked_as_a_plain_one(
    nothing_to_open: Path, command: str, prefix: str
) -> None:
    code, out, err = run_cli(*COMMANDS[command], "--user-json", '"b\\tob"')
    assert (code, out) == (1, "")
    assert err.strip().splitlines() == [
        f"{prefix}user_id must not contain control characters or line separators: character "
        "2 is U+0009"
    ]


def test_conflicts_list_looks_in_that_users_sandbox(nothing_to_open: Path) -> None:
    code, out, err = run_cli("conflicts", "list", "--user-json", '"a\\u00a0b"')
    assert code == 0, err
    assert out.strip() == "no kept-aside copies for 'a\\xa0b'"


def test_a_missing_copy_names_the_listing_in_the_form_that_takes_the_id_back(
    nothing_to_open: Path,
) -> None:
    code, _, err = run_cli(*COMMANDS["conflicts show"], "--user-json", '"a\\u00a0b"')
    assert code == 1
    assert "`memstrata conflicts list --user-json '\"a\\u00a0b\"'`" in err


def test_search_finds_the_users_memory_by_the_json_form(boxes: Path, db: Database) -> None:
    user = "a\u00a0b"  # listed as "a\u00a0b"; --user 'a\u00a0b' would be another id
    Indexer(db.sessions, None).index_turn(user, "s", 0, "the blue door is in Lisbon")
    code, out, err = run_cli("search", "--user-json", json.dumps(user), "--json", "blue door")
    assert code == 0, err
    assert [hit["text"] for hit in json.loads(out)["hits"]] == ["User: the blue door is in Lisbon"]
    code, out, _ = run_cli("search", "--user", "a\\u00a0b", "blue door")
    assert code == 0 and "has no memory files" in out
