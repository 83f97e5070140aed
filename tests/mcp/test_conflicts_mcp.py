"""The agent's kept-aside edits over MCP: ``memstrata://conflicts`` (a page of them) and
``memstrata://conflicts/{name}`` (one), read-only, through the SDK's in-process client on
the real runtime (PostgreSQL, directory sandboxes). Copies are made by a real sync
conflict, or written into the sandbox as sync names them."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, TextResourceContents

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.state import CONFLICT_DIR
from tests.api.test_conflicts import AGENT, BASE, HUMAN, NAME, plant, sandbox_dir, stamp
from tests.mcp.conftest import ClientFactory
from tests.sandbox.support import FaultyProvider

pytestmark = pytest.mark.anyio

LISTING = "memstrata://conflicts"
LISTED_BY = f"the resource {LISTING}"


async def real_conflict(mem: Memstrata, settings: Settings, user: str) -> str:
    """The agent edits a line of MEMORY.md in its sandbox; the user edits the same line
    before it is read back: the stored version wins and the agent's copy is kept aside."""
    first = await mem.sync.frontend_edit(user, FileKind.MEMORY, BASE)
    (sandbox_dir(settings, user) / "MEMORY.md").write_text(AGENT)  # the agent's shell
    await mem.sync.frontend_edit(user, FileKind.MEMORY, HUMAN, first.version)
    [copy] = (sandbox_dir(settings, user) / CONFLICT_DIR).iterdir()
    return copy.name


async def read(client: Client, uri: str) -> TextResourceContents:
    (item,) = (await client.read_resource(uri)).contents
    assert isinstance(item, TextResourceContents)
    return item


async def listing(client: Client, query: str = "") -> dict[str, Any]:
    item = await read(client, f"{LISTING}{query}")
    assert item.mime_type == "application/json"
    return dict(json.loads(item.text))


async def refused(client: Client, uri: str) -> MCPError:
    with pytest.raises(MCPError) as raised:
        await client.read_resource(uri)
    return raised.value


async def test_a_real_conflict_is_listed_and_read_not_dismissed(
    connect: ClientFactory, mem: Memstrata, settings: Settings
) -> None:
    name = await real_conflict(mem, settings, "alice")
    async with connect("alice") as client:
        resources = (await client.list_resources()).resources
        assert [(r.uri, r.mime_type) for r in resources][-1] == (LISTING, "application/json")
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates][1:] == [
            "memstrata://conflicts{?file,offset,limit}",
            "memstrata://conflicts/{name}",
        ]
        body = await listing(client)
        [copy] = body.pop("conflicts")
        assert body == {
            "total": 1,
            "offset": 0,
            "limit": 20,
            "next_offset": None,
            "sandbox": "ok",
            "warnings": [],
        }
        assert copy["uri"] == f"{LISTING}/{name}"
        assert (copy["name"], copy["reason"], copy["file"]) == (name, "conflict", "memory")
        assert copy["preview"] == "- lives in Marseille"  # the line the stored file has not

        item = await read(client, copy["uri"])
        again = await listing(client)
    assert (item.uri, item.mime_type, item.text) == (copy["uri"], "text/markdown", AGENT)
    assert item.meta is not None
    meta = {k: v for k, v in item.meta.items() if not k.startswith("io.modelcontextprotocol")}
    assert meta == {  # no null in a _meta: session_dir is left out
        "name": name,
        "file": "memory",
        "filename": "MEMORY.md",
        "reason": "conflict",
        "saved_at": copy["saved_at"],
        "path": f".memstrata/conflicts/{name}",
        "size_bytes": len(AGENT.encode()),
        "undecodable": False,
    }
    assert again["total"] == 1  # reading dismisses nothing
    assert (sandbox_dir(settings, "alice") / CONFLICT_DIR / name).exists()


async def test_the_listing_pages_like_the_service(
    connect: ClientFactory, settings: Settings
) -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    memory = [f"MEMORY.md.{stamp(start + timedelta(minutes=n))}.md" for n in range(5)]
    for n, name in enumerate(memory):
        plant(settings, "alice", name, f"copy {n}\n")
    session = "chat/7 é"  # its directory has escapes: chat%2F7%20%C3%A9
    rejected = f"USER.md.{stamp(start + timedelta(days=1))}.rejected.md"
    plant(settings, "alice", rejected, "- caf\xe9\n".encode("latin-1"), session=session)
    in_session = f"sessions/{safe_dir_name(session)}/{rejected}"
    newest = [in_session, *memory[::-1]]

    async with connect("alice") as client:
        first = await listing(client, "?limit=2")
        second = await listing(client, "?offset=2&limit=2")
        last = await listing(client, "?limit=2&offset=4")
        users = await listing(client, "?file=user")
        beyond = await listing(client, "?offset=99")
        last_offset = await listing(client, "?offset=2147483647&limit=50")  # REST's bound
        # The listing's uri (the name percent-encoded, "/" kept), the template's expansion
        # (everything encoded) and the name with its "/" as is all read the same copy.
        uri = first["conflicts"][0]["uri"]
        forms = [uri, f"{LISTING}/{quote(in_session, safe='')}"]
        forms.append(f"{LISTING}/sessions/{quote(safe_dir_name(session))}/{rejected}")
        copies = [await read(client, form) for form in forms]
    assert [c["name"] for c in first["conflicts"]] == newest[:2]
    assert (first["total"], first["next_offset"], first["limit"]) == (6, 2, 2)
    assert [c["name"] for c in second["conflicts"]] == newest[2:4]
    assert ([c["name"] for c in last["conflicts"]], last["next_offset"]) == (newest[4:], None)
    assert [c["name"] for c in users["conflicts"]] == [in_session]
    assert (beyond["conflicts"], beyond["total"]) == ([], 6)
    assert (last_offset["conflicts"], last_offset["offset"]) == ([], 2147483647)
    assert uri == f"{LISTING}/sessions/chat%252F7%2520%25C3%25A9/{rejected}"
    for item in copies:
        assert (item.uri, item.text) == (uri, "- caf\ufffd\n")
        assert item.meta is not None
        assert item.meta["session_dir"] == safe_dir_name(session)
        assert (item.meta["reason"], item.meta["undecodable"]) == ("rejected", True)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "..",
        "../USER.md",
        f"../{NAME}",
        f"../bob/{CONFLICT_DIR}/{NAME}",
        f"{CONFLICT_DIR}/{NAME}",
        f"sessions/../{NAME}",
        "MEMORY.md",
        NAME.replace("MEMORY", "AGENTS"),
        NAME.replace("20260301", "20261301"),  # month 13
        NAME + "\n",
        "x" * 5000,
    ],
)
async def test_a_name_that_is_not_a_copys_is_refused_naming_it(
    connect: ClientFactory, settings: Settings, name: str
) -> None:
    plant(settings, "alice", NAME, AGENT)
    async with connect("alice") as client:
        error = await refused(client, f"{LISTING}/{quote(name, safe='/')}")
        assert (await listing(client))["total"] == 1  # the session goes on
    assert error.code == INVALID_PARAMS
    assert error.message == (
        f"{name[:80]!r} is not the name of a kept-aside copy: names are as {LISTED_BY} "
        "lists them, such as 'MEMORY.md.20260301T120000.123456Z.md'"
    )
    assert error.data == {"status": 400, "code": "invalid_conflict_name"}


# How to fix a bad query, after what is wrong with it.
TAKES = (
    "; memstrata://conflicts takes file (user, soul or memory), offset (from 0) and limit "
    "(1 to 50), e.g. memstrata://conflicts?file=memory&offset=20&limit=20"
)


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("?limit=0", "limit must be from 1 to 50, got 0"),
        ("?limit=51", "limit must be from 1 to 50, got 51"),
        ("?limit=99999999999", "limit must be from 1 to 50, got 99999999999"),
        ("?limit=" + "9" * 30, "limit is out of range, got a number of 30 characters"),
        ("?offset=-1", "offset must be 0 or more, got -1"),
        ("?offset=2147483648", "offset must be from 0 to 2147483647, got 2147483648"),
        ("?offset=" + "9" * 4000, "offset is out of range, got a number of 4000 characters"),
        ("?offset=x", "offset must be a whole number, got 'x'"),
        ("?offset=", "offset must be a whole number, got ''"),
        ("?limit=1e3", "limit must be a whole number, got '1e3'"),
        ("?limit=1&limit=2", "limit is given more than once"),
        ("?user=bob", "unknown parameter(s) 'user'"),
        ("?=5", "unknown parameter(s) ''"),
        ("?us%0Aer=1", "unknown parameter(s) 'us\\ner'"),
        # Cut as a value is: not the whole of a name of any length, nor of any number.
        ("?" + "x" * 4000 + "=1", f"unknown parameter(s) {'x' * 40!r}"),
        ("?a=1&b=1&c=1&d=1&e=1&f=1&g=1", "unknown parameter(s) 'a', 'b', 'c' and 4 more"),
        ("?file=agents", "invalid file name: use one of user, soul, memory (file='agents')"),
        ("?file=diary", "invalid file name: use one of user, soul, memory (file='diary')"),
    ],
)
async def test_a_bad_page_is_refused_as_bad_params_saying_what_to_send(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture, query: str, problem: str
) -> None:
    """A malformed listing URI is answered as the server answers an unknown resource or a
    bad prompt argument: -32602 with how to fix it, and no REST status (REST answers the
    page's range with FastAPI's 422, a bad file with 400)."""
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        error = await refused(client, f"{LISTING}{query}")
        assert (await listing(client, "?offset=0&limit=50"))["total"] == 0  # the session goes on
    assert error.code == INVALID_PARAMS
    assert error.message == problem + TAKES
    assert error.data is None
    # INFO: the client's mistake, as REST logs its 4xx (no operator's warning).
    logged = [(r.levelno, event_fields(r)) for r in caplog.records]
    assert [(level, e) for level, e in logged if e.get("event") == "mcp.resource"] == [
        (
            logging.INFO,
            {
                "event": "mcp.resource",
                "method": "resources/read",
                "user_id": "alice",
                "error": problem + TAKES,
            },
        )
    ]
    assert not [e for level, e in logged if level >= logging.WARNING]


async def test_an_absent_copy_and_another_users_copies_are_not_found(
    connect: ClientFactory, mem: Memstrata, settings: Settings
) -> None:
    alices = await real_conflict(mem, settings, "alice")
    plant(settings, "alice", NAME, AGENT, session="s1")
    async with connect("bob") as client:
        empty = await listing(client)
        errors = [await refused(client, f"{LISTING}/{name}") for name in (alices, NAME)]
        errors.append(await refused(client, f"{LISTING}/sessions/s1/{NAME}"))
        errors.append(await refused(client, f"{LISTING}/../{safe_dir_name('alice')}/{alices}"))
    assert (empty["conflicts"], empty["total"]) == ([], 0)
    for error in errors[:3]:
        assert error.code == INVALID_PARAMS
        assert error.message.endswith(
            f": it was dismissed already, or never kept; {LISTED_BY} lists the copies there are"
        )
        assert error.data == {"status": 404, "code": "conflict_not_found"}
    assert errors[3].data == {"status": 400, "code": "invalid_conflict_name"}
    async with connect("alice") as client:
        assert (await listing(client))["total"] == 2


@pytest.fixture
def failing(settings: Settings, db: Database) -> Iterator[Memstrata]:
    """A runtime whose sandboxes fail at every call (an I/O error naming a host path)."""
    provider = FaultyProvider(
        LocalSandboxProvider(settings.resolved_sandbox_root),
        error=OSError(5, "Input/output error", "/srv/secret/sandboxes"),
    )
    runtime = Memstrata.open(settings, database=db, sandboxes=provider, embedder=None)
    yield runtime
    runtime.close()


async def test_a_failing_sandbox_is_said_without_its_paths(
    connect: ClientFactory, settings: Settings, failing: Memstrata
) -> None:
    plant(settings, "alice", NAME, AGENT)
    async with connect("alice", runtime=failing) as client:
        body = await listing(client)
        error = await refused(client, f"{LISTING}/{NAME}")
    assert (body["sandbox"], body["total"], body["conflicts"]) == ("sandbox_failed", None, [])
    assert body["warnings"] == [
        "the sandbox could not be listed (OSError): kept-aside copies cannot be shown; "
        "try again later"
    ]
    assert error.code == INTERNAL_ERROR
    assert error.message == "the copy could not be read from the sandbox (OSError); try again later"
    assert error.data == {"status": 503, "code": "sandbox_unavailable"}
    assert "/srv/secret" not in json.dumps([body, error.error.model_dump()])
