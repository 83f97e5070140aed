"""``agent.json_numbers``: the one rule both the in-process tools and MCP read integer
arguments by (``tests/agent/test_integral_numbers.py`` and
``tests/mcp/test_tool_numbers.py`` call the tools)."""

from __future__ import annotations

import pytest

from memstrata.agent.json_numbers import integer_arguments, shown
from memstrata.errors import ToolInputError


def test_the_rule_reads_the_schemas_integer_properties_only() -> None:
    schema = {"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}
    assert integer_arguments({"n": 2.0, "s": 2.0, "x": None}, schema) == {
        "n": 2,
        "s": 2.0,
        "x": None,
    }
    assert type(integer_arguments({"n": 2.0}, schema)["n"]) is int
    assert integer_arguments({"n": None}, schema) == {"n": None}  # left to the tool's check
    with pytest.raises(ToolInputError, match=r'^n must be a JSON integer: send -3, not " -3.00 "$'):
        integer_arguments({"n": " -3.00 "}, schema)


def test_a_value_is_shown_as_json_cut_short() -> None:
    assert shown(True) == "true"
    assert shown("x" * 50) == '"' + "x" * 38 + "…"
