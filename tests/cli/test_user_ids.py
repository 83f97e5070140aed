"""User ids the API accepts that do not show as they are: `memstrata user list` shows each
in one escaped form (a JSON string, quotes included) and `memstrata user erase --user-json`
takes that form back, so two ids that differ by an invisible character are listed apart
and each is erased alone.

Before, `user list` showed a bidi control as its escape, ``a\\u202eb``, exactly as it shows
the id holding a backslash, a ``u`` and four digits; a zero-width space, a no-break space
or a decomposed accent not at all. `user erase --user 'a\\u202eb'`, typed as listed,
erased the other user.

The users are created through the HTTP API (the real app on the test database), the
commands run through Typer's runner.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jwt
import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.store import MemoryStore
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.erasing import aside_name
from tests.cli.cli_env import run_cli
from tests.cli.test_erase_stored_ids import store_under
from tests.cli.test_user_cli import rows_of

# Each id `user list` shows, and how: those the API accepts and (``OLD``) those it refuses
# today that a database from before the rule may hold.
SHOWN = {
    "bob": "bob",
    "bob\u200b": '"bob\\u200b"',  # a zero-width space: listed as "bob"
    "a\u202eb": '"a\\u202eb"',  # a bidi override: listed as the next one
    "a\\u202eb": "a\\u202eb",  # a backslash, a "u" and four digits: plain
    "bob\u200e": '"bob\\u200e"',  # a left-to-right mark
    "e\u0301": '"e\\u0301"',  # e and a combining acute: listed as the next one
    "\u00e9": "\u00e9",  # é, one character
    "a\u00a0b": '"a\\u00a0b"',  # a no-break space: listed as "a b"
    "a b": "a b",
    "\u3164x": '"\\u3164x"',  # a Hangul filler, which shows as nothing
    "x\u2800y": '"x\\u2800y"',  # the Braille blank, which shows as a space: listed as "x y"
    '"q"': '"\\"q\\""',  # a quote first: escaped, so a quote always starts that form
    "中文 id": "中文 id",
}
# Format characters (Unicode category Cf) and the other default-ignorable ones (a Hangul
# filler), refused since: stored under them as before.
OLD = {"bob\u200b", "a\u202eb", "bob\u200e", "\u3164x"}
# What the API refuses: such an id cannot be created.
REFUSED = ["a\x01b", "a\tb", "a\nb", "bob ", " bob", "a\x85b", "a\u2028b", *sorted(OLD)]


@pytest.fixture
def api(open_runtime: Callable[..., Memstrata], settings: Settings) -> Iterator[Callable[..., int]]:
    """``put(user)``: the user's USER.md written over HTTP; the answer's status."""
    with TestClient(create_app(memstrata=open_runtime()), raise_server_exceptions=False) as client:

        def put(user: str) -> int:
            assert settings.jwt_secret is not None
            claims = {"sub": user, "exp": int(time.time()) + 600}
            token = jwt.encode(claims, settings.jwt_secret, algorithm="HS256")
            return client.put(
                "/api/config/agent-files/user",
                json={"content": f"- I am {user!r}"},
                headers={"Authorization": f"Bearer {token}"},
            ).status_code

        yield put


@pytest.fixture
def users(api: Callable[[str], int], boxes: Path, db: Database, store: MemoryStore) -> None:
    new = [user for user in SHOWN if user not in OLD]
    assert {user: api(user) for user in new} == dict.fromkeys(new, 200)
    for user in OLD:
        store_under(db, store, user)


def listed() -> list[str]:
    code, out, err = run_cli("user", "list")
    assert code == 0, err
    return [line.rsplit(None, 3)[0] for line in out.splitlines()[1:]]


def erase_as_listed(shown: str) -> tuple[int, str, str]:
    """`user erase` with the text `user list` showed, as the docs say to give it."""
    option = "--user-json" if shown.startswith('"') else "--user"
    return run_cli("user", "erase", option, shown, "--yes")


def test_the_api_refuses_ids_with_control_characters_or_outer_whitespace(
    api: Callable[[str], int],
) -> None:
    assert {user: api(user) for user in REFUSED} == dict.fromkeys(REFUSED, 401)


def test_list_shows_every_id_apart_in_a_form_erase_takes_back(users: None) -> None:
    assert sorted(listed()) == sorted(SHOWN.values())
    code, out, _ = run_cli("user", "list", "--json")  # the exact ids, as before
    assert code == 0 and sorted(u["user_id"] for u in json.loads(out)) == sorted(SHOWN)
    for shown in SHOWN.values():
        if shown.startswith('"'):
            assert shown.isascii() and json.loads(shown) in SHOWN


def test_each_id_is_erased_alone_by_the_form_list_shows(db: Database, users: None) -> None:
    left = dict(SHOWN)
    for user, shown in SHOWN.items():
        code, out, err = erase_as_listed(shown)
        assert code == 0, err
        assert out.splitlines()[0] == f"erased {user!r}"
        del left[user]
        assert rows_of(db, user) == 0
        assert sorted(listed()) == sorted(left.values())  # nobody else went


def test_erase_takes_the_form_list_json_gives_too(db: Database, users: None) -> None:
    code, out, _ = run_cli("user", "list", "--json")
    assert code == 0 and "a\u202eb" in [u["user_id"] for u in json.loads(out)]
    exact = json.dumps("a\u202eb", ensure_ascii=False)  # the raw character, as a script may
    code, out, err = run_cli("user", "erase", "--user-json", exact, "--yes")
    assert code == 0, err
    assert rows_of(db, "a\u202eb") == 0 and rows_of(db, "a\\u202eb") > 0


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--user-json", "a\\u202eb"], 2, "--user-json takes the id as a JSON string"),
        (["--user-json", '["bob"]'], 2, "--user-json takes the id as a JSON string"),
        (["--user-json", '"bob" x'], 2, "--user-json takes the id as a JSON string"),
        (["--user", "bob", "--user-json", '"bob"'], 2, "give --user or --user-json, not both"),
        ([], 2, "Missing option '--user': give --user ID, or --user-json"),
        (["--user-json", '"b\\tob"'], 1, "user_id must not contain control characters"),
    ],
)
def test_a_bad_user_json_erases_nothing(
    db: Database, users: None, args: list[str], code: int, said: str
) -> None:
    assert run_cli("user", "erase", *args, "--yes")[:2] == (code, "")
    _, _, err = run_cli("user", "erase", *args, "--yes")
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert sorted(listed()) == sorted(SHOWN.values())


def test_an_unfinished_erase_of_such_an_id_says_how_to_finish_it(db: Database, boxes: Path) -> None:
    user = "a\u00a0b"
    aside = boxes / aside_name(safe_dir_name(user))
    aside.mkdir(parents=True)
    (aside / "MEMORY.md").write_text("- left behind\n")

    code, out, err = run_cli("user", "list")

    assert (code, out) == (0, "no users\n")
    again = f"memstrata user erase --user-json {shlex.quote(SHOWN[user])} --yes"
    assert f"run `{again}` to finish it" in err
    code, out, err = run_cli("user", "erase", "--user-json", SHOWN[user], "--yes")
    assert code == 0, err
    assert not aside.exists()
