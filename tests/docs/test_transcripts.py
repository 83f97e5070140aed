"""The examples in README.md and docs/{API,MCP,DEPLOY,WEB}.md that show an answer run as
written, and answer what they show.

Each example is read from the .md file (never copied here), run with ``curl`` or the
``memstrata`` command against the package's one ``memstrata serve`` (tests/docs/served.py),
and compared with the documented answer by tests/docs/answers.py's matcher.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from sqlalchemy import create_engine, make_url, text

from tests.docs.answers import (
    Step,
    answer_mismatches,
    head_mismatches,
    mismatches,
    parse_pattern,
    text_matches,
    transcript,
)
from tests.docs.served import DOC_URL, Run, Served, blocks, doc, prose


def _wrong(step: Step, run: Run) -> list[str]:
    if run.code != 0:
        return [f"{step.command!r} exited with {run.code}: {run.stderr}"]
    return [f"{step.command!r}: {m}" for m in answer_mismatches(step.answer, run.answer())]


# --- README.md, "HTTP API" -------------------------------------------------------------


@pytest.fixture(scope="module")
def readme(served: Served) -> tuple[list[Step], list[Run]]:
    """README's transcript as written (its own `export TOKEN=$(… token …)` included), then
    its stale write again with the head, which docs/API.md shows."""
    (block,) = blocks("README.md", "sh", "curl")
    steps = transcript(block)
    stale = next(s for s in steps if "version_conflict" in " ".join(s.answer))
    again = stale.command.replace("curl -s ", "curl -si ", 1)
    return steps, served.sh(*(s.command for s in steps), again)


def test_readme_transcript(readme: tuple[list[Step], list[Run]]) -> None:
    steps, runs = readme
    assert sum(1 for s in steps if s.answer) >= 5  # read, write, stale write, skills, toggle
    ran = zip(steps, runs[: len(steps)], strict=True)
    wrong = [m for step, run in ran for m in _wrong(step, run)]
    assert not wrong, "\n".join(wrong)


def test_api_md_version_conflict(readme: tuple[list[Step], list[Run]]) -> None:
    (block,) = blocks("docs/API.md", "http", "version_conflict")
    status, body = block.split("\n", 1)
    answer = readme[1][-1].answer()
    wrong = head_mismatches([status], answer) + mismatches(
        parse_pattern(body), json.loads(answer.body)
    )
    assert not wrong, wrong


# --- docs/MCP.md -----------------------------------------------------------------------


def _mcp_steps() -> list[Step]:
    (block,) = blocks("docs/MCP.md", "sh", "curl")
    return transcript(block)


def test_mcp_md_initialize(served: Served) -> None:
    steps = _mcp_steps()
    assert any(s.answer for s in steps)
    runs = served.sh(*(s.command for s in steps))
    wrong = [m for step, run in zip(steps, runs, strict=True) for m in _wrong(step, run)]
    assert not wrong, "\n".join(wrong)


def test_mcp_md_host_and_origin_refusals(served: Served) -> None:
    """The json block (a foreign Origin) and the 421's message (a foreign Host), for the
    initialize request above with that header added."""
    doc = prose("docs/MCP.md")
    codes = re.search(
        r"another `Host` gets 421 `(\w+)`, one with another `Origin` gets 403 `(\w+)`", doc
    )
    assert codes is not None
    (block,) = blocks("docs/MCP.md", "json", "origin_not_allowed")
    shown = parse_pattern(block)
    origin = re.search(r"Origin '([^']+)'", shown["detail"])
    host = re.search(r"\(`(Host '([^']+)'[^`]*)` for the 421\.\)", doc)
    assert origin is not None and host is not None
    initialize = next(s.command for s in _mcp_steps() if "curl" in s.command)
    runs = served.sh(
        initialize.replace("curl -s ", f"curl -si -H 'Origin: {origin[1]}' ", 1),
        initialize.replace("curl -s ", f"curl -si -H 'Host: {host[2]}' ", 1),
    )
    to_origin, to_host = (run.answer() for run in runs)
    assert to_origin.status == "HTTP/1.1 403 Forbidden"
    assert not mismatches(shown, json.loads(to_origin.body)), to_origin.body
    assert shown["code"] == codes[2]
    assert to_host.status == "HTTP/1.1 421 Misdirected Request"
    refused = json.loads(to_host.body)
    assert refused["code"] == codes[1]
    assert text_matches(host[1], refused["detail"]), refused["detail"]
    assert refused["message"] == refused["error"]["message"] == refused["detail"]


# --- docs/API.md -----------------------------------------------------------------------


def _api_row(path: str) -> str:
    row = re.search(
        rf"^\| GET \| `{re.escape(path)}` \| none \| → (.*) \|$", doc("docs/API.md"), re.M
    )
    assert row is not None, path
    return row[1]


def test_api_md_health_and_readiness(served: Served) -> None:
    healthz = _api_row("/healthz")
    (ready,) = re.findall(r"^`\{([\w, ]+)\}`", _api_row("/readyz"))
    health_run, ready_run = served.sh(f"curl -s {DOC_URL}/healthz", f"curl -s {DOC_URL}/readyz")
    assert not mismatches(parse_pattern(healthz.strip("`")), json.loads(health_run.stdout))
    # Keys only: the values are this machine's. No disk is full here, so no disk keys.
    assert sorted(json.loads(ready_run.stdout)) == sorted(ready.split(", "))


def test_api_md_kept_aside_copy(served: Served) -> None:
    """The recipe in "Kept-aside agent edits" makes a copy, listed in the documented shape
    (its name, time and size are the moment's; the keys and value types must be those)."""
    user = f"kept-{uuid.uuid4().hex[:8]}"
    token = served.cli("token", "--user", user).stdout.strip()
    auth = f'-H "Authorization: Bearer {token}"'
    url = f"{DOC_URL}/api/config/agent-files/memory"
    (read,) = served.sh(f"curl -s {auth} {url}")
    stored = json.loads(read.stdout)
    copy = served.sandboxes / user / "MEMORY.md"
    lines = copy.read_text().split("\n")
    copy.write_text("\n".join(["# an agent's first line", *lines[1:]]))
    mine = served.sandboxes.parent / f"{user}.json"
    mine.write_text(json.dumps({"content": "\n".join(["# a person's first line", *lines[1:]])}))
    put, reread, listed = served.sh(
        f"curl -s -X PUT {auth} -H 'Content-Type: application/json'"
        f""" -H 'If-Match: "{stored["version"]}"' --data-binary @{mine} {url}""",
        f"curl -s {auth} {url}",
        f"curl -s {auth} {DOC_URL}/api/memory/conflicts",
    )
    # "The PUT answers 200 with version n + 1, your text, and the listing below shows the
    # agent's copy."
    assert json.loads(put.stdout)["version"] == stored["version"] + 1, put.stdout
    assert json.loads(reread.stdout)["content"] == json.loads(mine.read_text())["content"]
    (block,) = blocks("docs/API.md", "json", '"conflicts"')
    shown, answered = json.loads(block), json.loads(listed.stdout)
    assert _shape(shown) == _shape(answered), (block, answered)
    (kept,) = answered["conflicts"]
    assert kept["reason"] == "conflict"
    assert kept["preview"] == "# an agent's first line"  # what the copy changed


def _shape(value: object) -> object:
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__


# --- docs/WEB.md -----------------------------------------------------------------------


def test_web_md_merge_conflict(served: Served) -> None:
    doc = prose("docs/WEB.md")
    (block,) = blocks("docs/WEB.md", "", "/web/merge")
    route = re.search(r"^POST <prefix>(/\S+)", block, re.M)
    conflict = re.search(r"→ (\d+) .* or (\{.*?\}) when the edits conflict", block)
    case = re.search(
        r"base `([^`]*)`, mine `([^`]*)`, stored `([^`]*)` merged to `[^`]*` "
        r"where the server's rule sees a conflict",
        doc,
    )
    assert route is not None and conflict is not None and case is not None
    base, mine, theirs = (case[i].replace("⏎", "\n") for i in (1, 2, 3))
    body = json.dumps({"base": base, "mine": mine, "theirs": theirs})
    (run,) = served.sh(
        f"curl -si -X POST -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json'"
        f" -d '{body}' {DOC_URL}{route[1]}"
    )
    answer = run.answer()
    assert answer.status.split(" ")[1] == conflict[1], run.stdout
    assert not mismatches(parse_pattern(conflict[2]), json.loads(answer.body)), (
        case[0],
        answer.body,
    )


# --- the command line: README.md, docs/DEPLOY.md ---------------------------------------


def test_version_as_the_docs_print_it(served: Served) -> None:
    printed = served.cli("--version").stdout.strip()
    shown = {
        name: re.findall(r"`(memstrata \d[^`]*\(schema \w+\))`", doc(name))
        for name in ("README.md", "docs/DEPLOY.md")
    }
    assert all(shown.values()), shown
    assert {s for found in shown.values() for s in found} == {printed}
    status = served.cli("db", "status", "--json")
    assert status.returncode == 0, status.stderr
    said = json.loads(status.stdout)
    assert (said["up_to_date"], said["complete"], said["missing"]) == (True, True, [])
    assert printed.endswith(f"(schema {said['head']})")


def test_deploy_md_migration_and_incomplete_restore(served: Served, pg_url: str) -> None:
    """Section 2's commands on a new database, then section 8's restore that skipped
    pgvector: what `db status` says then is quoted in the prose."""
    commands = [s.command for s in transcript(*blocks("docs/DEPLOY.md", "sh", "db upgrade"))]
    doc = prose("docs/DEPLOY.md")
    claims = re.search(
        r"exits with status (\d), prints (`\"complete\": \w+`) and (`\"missing\": \[[^`]*\]`), "
        r"and says `([^`]*)`",
        doc,
    )
    assert claims is not None and len(commands) == 2
    name = f"doc_restore_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    url = make_url(pg_url).set(database=name)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        plain = url.render_as_string(hide_password=False)
        upgrade, status = served.sh(*(c.replace("…", plain) for c in commands))
        assert upgrade.code == 0 and status.code == 0, (upgrade.stderr, status.stderr)
        assert json.loads(status.stdout)["up_to_date"] is True
        restored = create_engine(url)
        with restored.begin() as conn:
            conn.execute(text("DROP EXTENSION vector CASCADE"))
            conn.execute(text("DROP TABLE memory_embeddings"))
        restored.dispose()
        (broken,) = served.sh(commands[1].replace("…", plain))
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    assert broken.code == int(claims[1])
    for quoted in (claims[2], claims[3]):
        assert quoted.strip("`") in broken.stdout, (quoted, broken.stdout)
    assert text_matches(f"…{claims[4]}…", broken.stderr), (claims[4], broken.stderr)
