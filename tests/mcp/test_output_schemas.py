"""Tools with a structured result declare its shape (``outputSchema``), and the results
match it: the SDK's client checks every successful call against the declared schema, and
so does this test, independently, with jsonschema."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok

pytestmark = pytest.mark.anyio

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("memory_read", {"name": "memory"}),
    ("memory_read", {"name": "agents"}),  # version null, read-only
    (
        "memory_write",
        {"name": "soul", "content": "# Soul\n- calm", "expected_version": 1, "replace_all": True},
    ),
    (
        "conversation_index_turn",
        {
            "session_id": "s1",
            "turn_index": 0,
            "user_message": "I keep bees",
            "assistant_reply": "Nice",
        },
    ),
    ("memory_search", {"query": "bees"}),
    ("skills_list", {}),
]


async def test_structured_results_match_their_declared_schema(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        declared = {name for name, t in tools.items() if t.output_schema is not None}
        assert declared == {
            "memory_search",
            "memory_read",
            "memory_write",
            "conversation_index_turn",
            "skills_list",
            "skill_set",
        }  # the agent write tools answer in text only
        skill = None
        for name, arguments in CALLS:
            result = await ok(client, name, arguments)
            schema = tools[name].output_schema
            assert schema is not None and schema["type"] == "object"
            errors = list(Draft202012Validator(schema).iter_errors(result.structured_content))
            assert errors == [], (name, [e.message for e in errors])
            if name == "skills_list":
                assert result.structured_content is not None
                skill = result.structured_content["skills"][0]["name"]
                builtin = [
                    s for s in result.structured_content["skills"] if s["category"] == "builtin"
                ]  # REST's fields, the English description too
                assert builtin and all(s["description_en"] for s in builtin), builtin
                hit_fields = set(
                    tools["memory_search"].output_schema["$defs"]["SearchHitBody"]["required"]
                )
                assert "explain" in hit_fields
        assert skill is not None
        toggled = await ok(client, "skill_set", {"skill_name": skill, "enabled": False})
        assert toggled.structured_content == {"skill_name": skill, "enabled": False}
        schema = tools["skill_set"].output_schema
        assert schema is not None
        assert list(Draft202012Validator(schema).iter_errors(toggled.structured_content)) == []
