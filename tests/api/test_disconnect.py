"""A client that goes away while its body is still being read is not a server error."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fastapi import FastAPI

from tests.api.auth import AuthHeader

pytestmark = pytest.mark.anyio


async def test_a_body_cut_off_by_a_disconnect_is_a_400_not_a_500(
    app: FastAPI, auth: AuthHeader
) -> None:
    headers = {**auth("alice"), "content-type": "application/json", "content-length": "100"}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/memory/search",
        "raw_path": b"/api/memory/search",
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8700),
        "state": {},
    }
    messages = [
        {"type": "http.request", "body": b'{"query": "te', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)  # a 500 would raise out of the app here

    [start] = [m for m in sent if m["type"] == "http.response.start"]
    assert start["status"] == 400
