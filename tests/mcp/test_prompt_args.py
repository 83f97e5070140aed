"""``prompts/get`` with arguments of the wrong type or name, without HTTP (as over stdio):
the server middleware names the argument where the SDK said only "Invalid request
parameters", and logs the refusal with the user."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from memstrata.logs import event_fields
from tests.mcp.conftest import ClientFactory

pytestmark = pytest.mark.anyio


async def get_prompt_raw(client: Client, name: Any, arguments: Any) -> mcp_types.GetPromptResult:
    """A ``prompts/get`` with ``arguments`` as given: the SDK client would refuse to send
    a non-string value itself."""
    params = mcp_types.GetPromptRequestParams.model_construct(name=name, arguments=arguments)
    request = mcp_types.GetPromptRequest.model_construct(method="prompts/get", params=params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's serializer notices the non-strings
        return await client.session.send_request(request, mcp_types.GetPromptResult)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        (
            "memory_context",
            {"token_limit": 4000},
            'token_limit must be a JSON string, e.g. "32000" (prompt arguments are strings '
            "in MCP); got 4000",
        ),
        (
            "memory_context",
            {"token_limit": {"tokens": 4000}},
            'token_limit must be a JSON string, e.g. "32000" (prompt arguments are strings '
            'in MCP); got {"tokens": 4000}',
        ),
        (
            "memory_context",
            {"token_limit": "4000", "budget": "0.5", "model": "x"},
            "unknown argument(s) budget, model; memory_context takes token_limit",
        ),
        (
            "memory_context",
            "4000",
            'arguments must be a JSON object of strings, e.g. {"token_limit": "32000"}; got "4000"',
        ),
        (  # an unknown prompt says so whatever its arguments
            "system_prompt",
            {"token_limit": 4000},
            "unknown prompt 'system_prompt'; available: memory_context",
        ),
        (
            7,
            {"token_limit": "4000"},
            "name must be a JSON string, the prompt's name; got 7; available: memory_context",
        ),
    ],
)
async def test_bad_prompt_arguments_are_named(
    connect: ClientFactory,
    caplog: pytest.LogCaptureFixture,
    name: Any,
    arguments: Any,
    message: str,
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata.mcp.prompt_args")
    async with connect("prompt-args-alice") as client:
        with pytest.raises(MCPError) as raised:
            await get_prompt_raw(client, name, arguments)
        assert (raised.value.code, raised.value.message) == (-32602, message)
        good = await get_prompt_raw(client, "memory_context", {"token_limit": "4000"})
        assert good.messages  # the session goes on
    events = [
        (r.levelno, event_fields(r))
        for r in caplog.records
        if event_fields(r).get("event") == "mcp.prompt"
    ]
    # INFO: the client's mistake, as REST logs its 4xx; user and cause kept.
    assert [(level, e["user_id"], e["error"]) for level, e in events] == [
        (logging.INFO, "prompt-args-alice", message)
    ]
