"""A token whose signature does not match a key of the server's is logged once per request,
as a WARNING naming the user it claims, and never with the token.

Before, ``auth.token.forged`` (and ``auth.token.foreign_key``) named no user, and on
``/mcp`` the same refusal was logged a second time as ``mcp.request.refused``. A real
``memstrata serve`` on the session's PostgreSQL; both transports, both kinds of bad
signature.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from tests.cli.test_shutdown_grace import serving
from tests.log_lines import events_in
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.mcp.served import SECRET, token
from tests.retrieval.fault_server import FaultServer
from tests.served import Served

pytestmark = pytest.mark.timeout(120)

OTHER_SECRET = "another-deployment-secret-0123456789abcdef"


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def forged(user: str) -> str:
    """A token of ours whose signature was changed."""
    head, claims, signature = token(user).split(".")
    tail = "AAAA" if not signature.endswith("AAAA") else "BBBB"
    return f"{head}.{claims}.{signature[:-4]}{tail}"


def foreign(user: str) -> str:
    """A token signed with another deployment's secret, whose key id is not ours."""
    now = int(time.time())
    claims = {"sub": user, "iat": now - 5, "exp": now + 600}
    return jwt.encode(claims, OTHER_SECRET, "HS256", headers={"kid": "0123456789abcdef"})


def refused(served: Served, path: str, bearer_token: str) -> list[dict[str, Any]]:
    """The lines logged for one request with ``bearer_token`` (401), its access line aside."""
    headers = {"Authorization": f"Bearer {bearer_token}"}
    if path == "/mcp":
        response = httpx.post(served.url + path, headers={**MCP_HEADERS, **headers}, json=INIT)
    else:
        response = httpx.post(served.url + path, headers=headers, json={"query": "tea"})
    assert response.status_code == 401, response.text
    request_id = response.headers["x-request-id"]
    deadline = time.monotonic() + 5
    while True:  # the access line is written last
        lines = [e for e in events_in(served.log) if e.get("request_id") == request_id]
        if any(e["event"] == "http.request" for e in lines) or time.monotonic() > deadline:
            return [e for e in lines if e["event"] != "http.request"]
        time.sleep(0.05)


@pytest.mark.parametrize("path", ["/mcp", "/api/memory/search"])
def test_a_bad_signature_is_logged_once_naming_its_user(
    tmp_path: Path, pg_url: str, fake: FaultServer, path: str
) -> None:
    with serving(tmp_path, pg_url, fake, 5, secret=SECRET) as served:
        cases = [(forged, "forge-ana", "auth.token.forged")]
        cases.append((foreign, "forge-bo", "auth.token.foreign_key"))
        sent = []
        for make, user, event in cases:
            bad = make(user)
            sent.append(bad)
            lines = refused(served, path, bad)
            assert [(e["event"], e["level"]) for e in lines] == [(event, "warning")], lines
            assert lines[0]["claimed_user_id"] == user, lines
        log = served.log.read_text()
        for bad in sent:
            assert bad not in log and bad.rsplit(".", 1)[1] not in log
