"""Integer arguments as a model's client sends them, one rule for the in-process tools
(:func:`memstrata.agent.schemas.check_arguments`) and MCP (``memstrata.mcp.tool_args``).

JSON Schema counts ``5.0`` as an integer, and a model's client may well send it so (a
framework that decodes ``"top_k": 5.0`` passes a float on); it is read as 5. ``5.5``,
``true`` and ``"5"`` are no integers: each is refused with the value sent, and a quoted
whole number with what to send instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from memstrata.errors import ToolInputError

_SHOWN_CHARS = 40  # of a refused value, as a refusal echoes it
# A string that spells a whole number, as a model may quote one ("5", "2.0").
_QUOTED_NUMBER = re.compile(r"\s*([-+]?[0-9]{1,30})(?:\.0*)?\s*")


def integer_arguments(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with each value of an ``integer`` property of ``schema`` an int
    (:func:`json_integer`). A missing or null value is left to the tool's own check (a
    required one is refused there, an optional one takes its default)."""
    properties = schema.get("properties", {})
    integers = {name for name, spec in properties.items() if spec.get("type") == "integer"}
    return {
        name: json_integer(name, value) if name in integers and value is not None else value
        for name, value in arguments.items()
    }


def json_integer(name: str, value: object) -> int:
    """``value`` of argument ``name`` as an int: an int, or an integral float (``5.0``);
    anything else is a :class:`~memstrata.errors.ToolInputError` echoing it (module doc)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and (spelled := _QUOTED_NUMBER.fullmatch(value)):
        raise ToolInputError(
            f"{name} must be a JSON integer: send {int(spelled.group(1))}, not {shown(value)}"
        )
    raise ToolInputError(f"{name} must be a JSON integer; got {shown(value)}")


def shown(value: Any) -> str:
    """A JSON value as it was sent, cut short."""
    text = json.dumps(value)  # escaped: a lone surrogate could not be sent back
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
