"""``/api/memory/conflicts``: the agents' kept-aside copies, listed, read and dismissed over
HTTP, against the real database and real directory sandboxes.

The copies are made the way sync makes them (an agent edit in the sandbox, then a human's
edit of the same line through the API), or written into a user's sandbox as sync names
them, for the paging and name checks that need many.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memstrata.config import Settings
from memstrata.memory.conflicts import MAX_PAGE
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.state import CONFLICT_DIR, utc_stamp
from tests.api.auth import AuthHeader

LIST = "/api/memory/conflicts"
MEMORY = "/api/config/agent-files/memory"
BASE = "# MEMORY\n- likes tea\n- lives in Lyon\n- walks the dog at 7\n"
HUMAN = BASE.replace("lives in Lyon", "lives in Paris")
AGENT = BASE.replace("lives in Lyon", "lives in Marseille")


def one(name: str) -> str:
    """The URL of the copy ``name``, percent-encoded (dots too, or a client would resolve
    a name of dots as a path segment before sending it)."""
    return f"{LIST}/{quote(name, safe='').replace('.', '%2E')}"


def sandbox_dir(settings: Settings, user: str, session: str | None = None) -> Path:
    directory = settings.resolved_sandbox_root / safe_dir_name(user)
    return directory if session is None else directory / "sessions" / safe_dir_name(session)


def real_conflict(client: TestClient, auth: AuthHeader, settings: Settings, user: str) -> str:
    """The agent edits a line of MEMORY.md in the sandbox; the user edits the same line on
    the page before it is read back: the stored version wins, the agent's copy is kept
    aside. Returns the copy's name."""
    first = client.put(MEMORY, headers=auth(user), json={"content": BASE})
    assert first.status_code == 200, first.text
    (sandbox_dir(settings, user) / "MEMORY.md").write_text(AGENT)  # the agent's shell
    version = first.json()["version"]
    second = client.put(
        MEMORY, headers={**auth(user), "If-Match": f'"{version}"'}, json={"content": HUMAN}
    )
    assert second.status_code == 200, second.text
    [copy] = (sandbox_dir(settings, user) / CONFLICT_DIR).iterdir()
    return copy.name


def plant(
    settings: Settings, user: str, name: str, text: str | bytes, session: str | None = None
) -> None:
    """A copy as sync names them, written straight into the user's sandbox directory."""
    directory = sandbox_dir(settings, user, session) / CONFLICT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def stamp(moment: datetime) -> str:
    return utc_stamp(lambda: moment)


def test_a_real_conflict_is_listed_read_and_dismissed(
    client: TestClient, auth: AuthHeader, settings: Settings
) -> None:
    before = datetime.now(UTC)
    name = real_conflict(client, auth, settings, "ada")
    assert client.get(MEMORY, headers=auth("ada")).json()["content"] == HUMAN

    listed = client.get(LIST, headers=auth("ada"))
    assert listed.status_code == 200, listed.text
    body = listed.json()
    [copy] = body.pop("conflicts")
    assert body == {
        "total": 1,
        "offset": 0,
        "limit": 20,
        "next_offset": None,
        "sandbox": "ok",
        "warnings": [],
    }
    saved_at = datetime.fromisoformat(copy.pop("saved_at"))
    assert before <= saved_at <= datetime.now(UTC)
    assert copy == {
        "name": name,
        "file": "memory",
        "filename": "MEMORY.md",
        "reason": "conflict",
        "session_dir": None,
        "path": f".memstrata/conflicts/{name}",
        "size_bytes": len(AGENT.encode()),
        "preview": "- lives in Marseille",  # the line the stored file has not
    }

    read = client.get(one(name), headers=auth("ada"))
    assert read.status_code == 200, read.text
    assert read.json()["content"] == AGENT
    assert read.json()["undecodable"] is False
    assert read.json()["size_bytes"] == len(AGENT.encode())

    dismissed = client.delete(one(name), headers=auth("ada"))
    assert dismissed.status_code == 200, dismissed.text
    assert dismissed.json() == {"name": name, "message": "ok"}
    assert not (sandbox_dir(settings, "ada") / CONFLICT_DIR / name).exists()
    assert client.get(LIST, headers=auth("ada")).json()["conflicts"] == []
    again = client.delete(one(name), headers=auth("ada"))
    assert again.status_code == 404
    assert again.json()["code"] == "conflict_not_found"
    assert name in again.json()["message"]
    assert client.get(one(name), headers=auth("ada")).status_code == 404


NAME = f"MEMORY.md.{stamp(datetime(2026, 3, 1, 12, tzinfo=UTC))}.md"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", LIST),
        ("GET", f"{LIST}?limit=0&offset=-1&file=agents"),
        ("GET", one(NAME)),
        ("GET", one("../../bob/.memstrata/conflicts/" + NAME)),
        ("GET", f"{LIST}/"),
        ("DELETE", one(NAME)),
        ("DELETE", one("..%2F" + NAME)),
        ("DELETE", f"{LIST}/nope"),
    ],
)
def test_the_token_is_checked_before_anything_else(
    client: TestClient, settings: Settings, method: str, path: str
) -> None:
    plant(settings, "ada", NAME, AGENT)
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        response = client.request(method, path, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert (sandbox_dir(settings, "ada") / CONFLICT_DIR / NAME).exists()


@pytest.mark.parametrize(
    "name",
    [
        "",
        "..",
        "../USER.md",
        f"../{NAME}",
        f"./{NAME}",
        f".memstrata/conflicts/{NAME}",
        f"/{NAME}",
        f"{NAME}/",
        f"sessions/../{NAME}",
        f"sessions/a/b/{NAME}",
        f"sessions/A/{NAME}",  # directory names are never upper-case
        "MEMORY.md",
        "notes.txt",
        NAME.replace("MEMORY", "AGENTS"),
        NAME.replace("MEMORY", "memory"),
        NAME.replace("20260301", "20261301"),  # month 13
        NAME.replace("20260301", "20260230"),  # 30 February
        NAME.replace(".md", ".txt"),
        NAME + "\n",
        NAME.replace("2026", "２026"),  # a full-width digit
        NAME.replace("Z.md", "Z.rejected.txt"),
        "x" * 5000,
    ],
)
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_name_that_is_not_a_copys_is_400_naming_it(
    client: TestClient, auth: AuthHeader, settings: Settings, name: str, method: str
) -> None:
    plant(settings, "ada", NAME, AGENT)
    (sandbox_dir(settings, "ada") / "MEMORY.md").write_text(BASE)
    (sandbox_dir(settings, "ada") / CONFLICT_DIR / "notes.txt").write_text("not a copy")
    path = one(name) if name else f"{LIST}/"
    if not name and method == "GET":
        # "/" lists, like the path without it
        assert client.get(path, headers=auth("ada")).json()["total"] == 1
        return
    response = client.request(method, path, headers=auth("ada"))
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "invalid_conflict_name"
    assert repr(name[:80]) in body["detail"]
    assert "GET /api/memory/conflicts" in body["message"]
    assert (sandbox_dir(settings, "ada") / "MEMORY.md").read_text() == BASE
    assert (sandbox_dir(settings, "ada") / CONFLICT_DIR / "notes.txt").exists()


def test_another_users_copies_cannot_be_reached(
    client: TestClient, auth: AuthHeader, settings: Settings
) -> None:
    bobs = real_conflict(client, auth, settings, "bob")
    plant(settings, "bob", NAME, AGENT, session="s1")
    bob_dir = safe_dir_name("bob")

    assert client.get(LIST, headers=auth("ada")).json()["conflicts"] == []
    for name in (bobs, f"sessions/s1/{NAME}"):
        for method in ("GET", "DELETE"):
            response = client.request(method, one(name), headers=auth("ada"))
            assert response.status_code == 404, (method, name, response.text)
            assert response.json()["code"] == "conflict_not_found"
    for name in (f"../{bob_dir}/{bobs}", f"sessions/../../{bob_dir}/{bobs}"):
        assert client.delete(one(name), headers=auth("ada")).status_code == 400
    listed = client.get(LIST, headers=auth("bob")).json()
    assert sorted(c["name"] for c in listed["conflicts"]) == sorted([bobs, f"sessions/s1/{NAME}"])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_copies_in_a_session_sandbox_are_listed_with_their_directory(
    app: FastAPI, auth: AuthHeader, settings: Settings
) -> None:
    # httpx's ASGI transport: Starlette's TestClient decodes a path twice, which would make
    # the %25 of a directory's escapes a "%" before the app saw it (uvicorn decodes once).
    session = "chat/7 é"  # a directory name with escapes: chat%2F7%20%C3%A9
    directory = safe_dir_name(session)
    rejected = f"USER.md.{stamp(datetime(2026, 3, 2, tzinfo=UTC))}.rejected.md"
    latin1 = "- caf\xe9 au lait\n".encode("latin-1")
    plant(settings, "ada", rejected, latin1, session=session)
    plant(settings, "ada", NAME, AGENT)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        listed = (await client.get(LIST, headers=auth("ada"))).json()
        names = [c["name"] for c in listed["conflicts"]]
        assert names == [f"sessions/{directory}/{rejected}", NAME]  # newest first
        first = listed["conflicts"][0]
        assert (first["session_dir"], first["reason"], first["file"]) == (
            directory,
            "rejected",
            "user",
        )
        assert first["path"] == f"sessions/{directory}/.memstrata/conflicts/{rejected}"
        assert first["size_bytes"] == len(latin1)

        read = (await client.get(one(names[0]), headers=auth("ada"))).json()
        assert read["undecodable"] is True
        assert read["content"] == "- caf\ufffd au lait\n"
        assert read["size_bytes"] == len(latin1)
        assert (await client.delete(one(names[0]), headers=auth("ada"))).status_code == 200
        assert not (sandbox_dir(settings, "ada", session) / CONFLICT_DIR / rejected).exists()
        after = (await client.get(LIST, headers=auth("ada"))).json()
        assert [c["name"] for c in after["conflicts"]] == [NAME]


def test_thousands_of_copies_come_a_page_at_a_time(
    client: TestClient, auth: AuthHeader, settings: Settings
) -> None:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    memory = [f"MEMORY.md.{stamp(start + timedelta(minutes=n))}.md" for n in range(2000)]
    for n, name in enumerate(memory):
        plant(settings, "ada", name, f"copy {n}\n" * (n % 5 + 1))
    soul = f"SOUL.md.{stamp(start - timedelta(days=1))}.md"
    plant(settings, "ada", soul, "soul\n")
    newest = memory[::-1]

    started = time.monotonic()
    first = client.get(f"{LIST}?limit={MAX_PAGE}", headers=auth("ada"))
    took = time.monotonic() - started
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["total"], body["next_offset"], body["limit"]) == (2001, MAX_PAGE, MAX_PAGE)
    assert [c["name"] for c in body["conflicts"]] == newest[:MAX_PAGE]
    assert body["conflicts"][0]["preview"] == "copy 1999\ncopy 1999\ncopy 1999"
    assert took < 10, took  # two directory walks and 50 reads, on a busy machine

    last = client.get(f"{LIST}?offset=1990&limit={MAX_PAGE}", headers=auth("ada")).json()
    assert [c["name"] for c in last["conflicts"]] == [*newest[1990:], soul]
    assert last["next_offset"] is None
    souls = client.get(f"{LIST}?file=soul", headers=auth("ada")).json()
    assert ([c["name"] for c in souls["conflicts"]], souls["total"]) == ([soul], 1)
    beyond = client.get(f"{LIST}?offset=5000", headers=auth("ada")).json()
    assert (beyond["conflicts"], beyond["total"], beyond["next_offset"]) == ([], 2001, None)

    for query in (f"limit={MAX_PAGE + 1}", "limit=0", "offset=-1", "limit=x"):
        refused = client.get(f"{LIST}?{query}", headers=auth("ada"))
        assert refused.status_code == 422, query
        assert refused.json()["code"] == "validation_error"
    bad_file = client.get(f"{LIST}?file=agents", headers=auth("ada"))
    assert (bad_file.status_code, bad_file.json()["code"]) == (400, "invalid_file_name")


def test_openapi_documents_the_routes_with_their_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    listing = spec["paths"]["/api/memory/conflicts"]["get"]
    params = {p["name"]: p for p in listing["parameters"]}
    assert params["limit"]["schema"]["maximum"] == MAX_PAGE
    assert sorted(params["file"]["schema"]["enum"]) == ["memory", "soul", "user"]
    assert {"400", "401", "422", "503"} <= set(listing["responses"])
    for method in ("get", "delete"):
        operation = spec["paths"]["/api/memory/conflicts/{name}"][method]
        responses = operation["responses"]
        assert {"200", "400", "401", "404", "503"} <= set(responses)
        codes = {
            status: responses[status]["content"]["application/json"]["example"]["code"]
            for status in ("400", "404", "503")
        }
        assert codes == {
            "400": "invalid_conflict_name",
            "404": "conflict_not_found",
            "503": "sandbox_unavailable",
        }
    schemas = spec["components"]["schemas"]
    assert schemas["ConflictCopy"]["properties"]["name"]["examples"] == [
        "MEMORY.md.20260301T120000.123456Z.md"
    ]
