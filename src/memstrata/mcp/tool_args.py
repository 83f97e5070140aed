"""A tool's arguments parsed with the REST API's messages, and the JSON Schemas the
catalogue states for a tool's arguments and result.

Integer arguments are read as JSON Schema reads them, by the agent tools' rule
(:func:`integer_arguments`, :mod:`memstrata.agent.json_numbers`): ``5.0`` is an integer
there, and a model's client may well send it so; ``5.5``, ``true`` and ``"5"`` are not,
and are refused with the value sent (and for ``"5"``, what to send instead).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memstrata.agent import json_numbers
from memstrata.agent.schemas import without_null_optionals
from memstrata.api.errors import validation_error
from memstrata.errors import ToolInputError
from memstrata.mcp.base import ToolError

M = TypeVar("M", bound=BaseModel)

# How to fix an argument whose REST-style message ("expected_version: Field required")
# says only what is wrong.
_FIXES = {
    "expected_version": "call memory_read first and pass the version it returns as "
    "expected_version (0 for a file that does not exist yet)",
    "timestamp": "timestamp is ISO 8601, e.g. 2026-12-05T10:00:00Z; leave it out for now",
}


def integer_arguments(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The agent tools' rule for integer arguments
    (:func:`memstrata.agent.json_numbers.integer_arguments`), its refusal a ``ToolError``."""
    try:
        return json_numbers.integer_arguments(arguments, schema)
    except ToolInputError as exc:
        raise ToolError(str(exc)) from exc


def parse_arguments(model: type[M], arguments: dict[str, Any]) -> M:
    optional = {name for name, f in model.model_fields.items() if not f.is_required()}
    arguments = integer_arguments(arguments, _schema(model))
    try:
        return model.model_validate(without_null_optionals(arguments, optional))
    except ValidationError as exc:
        wrong = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        fixes = [fix for name, fix in _FIXES.items() if name in wrong]
        detail = str(validation_error(exc.errors()).body["detail"])
        raise ToolError("; ".join([detail, *fixes])) from exc


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return args_schema(model)


def json_text(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


def args_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


def result_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="serialization")
    schema.pop("title", None)
    return schema
