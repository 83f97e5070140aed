"""What agents and API callers wrote reaches the operator's terminal as visible escapes,
never as escape sequences, other control characters or bidi controls the terminal would act
on: `conflicts list`, `conflicts show` on a terminal, `search`, `user list` and error lines,
run for real (Typer's runner, and a pseudo-terminal for `show`). Into a pipe, `conflicts
show` stays exact; `--json` is the same data, with no raw DEL, C1 or bidi control."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.indexer import Indexer
from memstrata.terminal import json_text, visible
from tests.api.test_conflicts import NAME, plant
from tests.cli.cli_env import clean_env, run_cli

# Escape sequences as an agent could plant them: clear the screen and home the cursor,
# write the clipboard (OSC 52), a hyperlink whose text is not its target (OSC 8), an
# 8-bit CSI (C1), DEL, NUL, a bidi override, and a carriage return that rewrites a line.
CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
LINK = "\x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\"
EVIL = (
    f"clear {CLEAR} and clip {CLIPBOARD}\n"
    f"link {LINK} c1 \x9b31m del \x7f nul \x00\ttab\n"
    "bidi \u202eevil\u202c ok\n"
    "over\rwritten, CR LF kept\r\n"
)
# Anything a terminal acts on, but the newline (and, in text shown as lines, tab and CR LF).
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("text", "field", "lines"),
    [
        ("plain, 中文, café, 👩‍💻 (a ZWJ)", "plain, 中文, café, 👩‍💻 (a ZWJ)", None),
        ("\x1b[2J", "\\x1b[2J", None),
        ("\x1b]52;c;eA==\x07", "\\x1b]52;c;eA==\\x07", None),
        ("a\x00b\x7fc\x9bd", "a\\x00b\\x7fc\\x9bd", None),
        (
            "\u202eevil\u202c \u2066x\u2069 \u200f\u061c",
            "\\u202eevil\\u202c \\u2066x\\u2069 \\u200f\\u061c",
            None,
        ),
        ("a\tb\nc", "a\\tb\\nc", "a\tb\nc"),
        ("over\rwrite\r\n", "over\\rwrite\\r\\n", "over\\rwrite\r\n"),
        ("back\\x1b slash", "back\\x1b slash", None),  # left alone: harmless as it is
    ],
)
def test_visible_escapes_what_a_terminal_acts_on(text: str, field: str, lines: str | None) -> None:
    assert visible(text) == field
    assert visible(text, lines=True) == (field if lines is None else lines)


def test_json_text_is_the_same_data_with_no_raw_control() -> None:
    value = {"content": EVIL, "\u202ekey": ["\x85", "中文"]}
    out = json_text(value)
    assert json.loads(out) == value
    assert not ACTIVE.search(out) and "\n" not in out
    assert "中文" in out  # non-ASCII text stays as it is


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """A sandbox root and no database: `conflicts` needs none."""
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_SANDBOX_ROOT": str(tmp_path / "boxes"),
        },
    )
    settings = Settings()
    plant(settings, "alice", NAME, EVIL)
    return settings


def test_conflicts_list_shows_the_preview_escaped(sandbox: Settings) -> None:
    code, out, err = run_cli("conflicts", "list", "--user", "alice")
    assert (code, err) == (0, "")
    assert not ACTIVE.search(out)
    assert out.splitlines()[2:5] == [
        "    | clear \\x1b[2J\\x1b[H and clip \\x1b]52;c;cm0gLXJmIH4=\\x07",
        "    | link \\x1b]8;;https://evil.example\\x1b\\docs\\x1b]8;;\\x1b\\ "
        "c1 \\x9b31m del \\x7f nul \\x00\\ttab",
        "    | bidi \\u202eevil\\u202c ok",
    ]


def test_conflicts_json_is_the_same_text_with_no_raw_control(sandbox: Settings) -> None:
    for args in (["list"], ["show", NAME]):
        code, out, err = run_cli("conflicts", *args, "--user", "alice", "--json")
        assert (code, err) == (0, "")
        assert not ACTIVE.search(out)
        body = json.loads(out)
        shown = body["content"] if "content" in body else body["conflicts"][0]["preview"]
        assert EVIL.startswith(shown)


def test_conflicts_show_into_a_pipe_is_exact(sandbox: Settings) -> None:
    """Not a terminal: the text is data, kept byte for byte (click strips what looks like a
    colour code from output that is not a terminal's; ``show`` must not let it)."""
    # The bytes: the runner's ``stdout`` turns CR LF into LF, as a file would not.
    result = CliRunner().invoke(build_app(), ["conflicts", "show", "--user", "alice", NAME])
    assert (result.exit_code, result.stdout_bytes) == (0, EVIL.encode())
    assert "escapes" not in result.stderr


def test_conflicts_show_on_a_terminal_escapes_and_says_so(sandbox: Settings) -> None:
    main, secondary = pty.openpty()
    # No output processing (the line discipline would write each "\n" as "\r\n"): the
    # bytes read are the bytes the command wrote.
    modes = termios.tcgetattr(secondary)
    modes[1] &= ~termios.OPOST
    termios.tcsetattr(secondary, termios.TCSANOW, modes)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "memstrata.cli", "conflicts", "show", "--user", "alice", NAME],
            stdout=secondary,
            stderr=subprocess.PIPE,
        )
        os.close(secondary)
        shown = _read_all(main)
        _, err = process.communicate(timeout=60)
    finally:
        os.close(main)
    assert process.returncode == 0, err
    assert shown.decode() == visible(EVIL, lines=True)
    assert not ACTIVE.search(shown.decode().replace("\r\n", "\n"))
    assert err.decode().endswith(
        "; control characters are shown as escapes such as \\x1b "
        "(redirect stdout for the exact text)\n"
    )


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_an_error_line_shows_what_it_quotes_escaped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(tmp_path / "data")})
    code, out, err = run_cli("conflicts", "show", "--user", "alice", f"a{CLIPBOARD}")
    assert (code, out) == (1, "")
    assert not ACTIVE.search(err)
    assert "'a\\x1b]52;c;cm0gLXJmIH4=\\x07' is not the name" in err


def test_a_user_id_with_control_characters_is_refused_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(tmp_path / "data")})
    code, out, err = run_cli("conflicts", "show", "--user", f"a{CLIPBOARD}", "bad-name")
    assert (code, out) == (1, "")
    assert not ACTIVE.search(err)
    assert "character 2 is U+001B" in err


@pytest.fixture
def indexed(db: Database, boxes: Path) -> str:
    """A user whose conversation text holds escape sequences (a user id or a session id may
    hold none: every entry point refuses them)."""
    said = f"blue door {LINK}\n{CLIPBOARD}\x9b2J \u202eevil"
    Indexer(db.sessions, None).index_turn("eve", "s", 0, said, "")
    return "eve"


@pytest.fixture
def legacy_id(db: Database, boxes: Path) -> str:
    """A user id with escape sequences, as a database written before ids were checked for
    control characters may still hold one."""
    user = f"eve{CLEAR}"
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO user_memory (user_id, file_type, content) VALUES (:u, 'user_md', 'x')"
            ),
            {"u": user},
        )
    return user


def test_search_shows_hits_escaped(indexed: str) -> None:
    code, out, err = run_cli("search", "--user", indexed, "blue door")
    assert code == 0, err
    assert not ACTIVE.search(out)
    path, *text = out.splitlines()
    assert path.startswith(" 1. [conversation] sessions/s/0#0 ")
    assert text[:2] == [
        "    User: blue door \\x1b]8;;https://evil.example\\x1b\\docs\\x1b]8;;\\x1b\\",
        "    \\x1b]52;c;cm0gLXJmIH4=\\x07\\x9b2J \\u202eevil",
    ]
    code, out, _ = run_cli("search", "--user", indexed, "blue door", "--json")
    assert code == 0 and not ACTIVE.search(out)
    assert json.loads(out)["hits"][0]["text"].startswith(f"User: blue door {LINK}\n{CLIPBOARD}")


def test_user_list_shows_ids_escaped(legacy_id: str) -> None:
    code, out, err = run_cli("user", "list")
    assert (code, err) == (0, "")
    assert not ACTIVE.search(out)
    header, row = out.splitlines()
    shown = '"eve\\u001b[2J\\u001b[H"'  # the escaped form of an id that does not show as it is
    assert row.split() == [shown, "1", "0", "0"]
    assert header.startswith(f"{'user':{len(shown)}s}  files")  # the column fits it
    code, out, _ = run_cli("user", "list", "--json")
    assert [u["user_id"] for u in json.loads(out)] == [legacy_id]
