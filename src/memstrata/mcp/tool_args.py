"""A tool's arguments parsed with the REST API's messages, and the JSON Schemas the
catalogue states for a tool's arguments and result."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memstrata.agent.schemas import without_null_optionals
from memstrata.api.errors import validation_error
from memstrata.mcp.base import ToolError

M = TypeVar("M", bound=BaseModel)

# How to fix an argument whose REST-style message ("expected_version: Field required")
# says only what is wrong.
_FIXES = {
    "expected_version": "call memory_read first and pass the version it returns as "
    "expected_version (0 for a file that does not exist yet)",
    "timestamp": "timestamp is ISO 8601, e.g. 2026-12-05T10:00:00Z; leave it out for now",
}


def parse_arguments(model: type[M], arguments: dict[str, Any]) -> M:
    optional = {name for name, f in model.model_fields.items() if not f.is_required()}
    try:
        return model.model_validate(without_null_optionals(arguments, optional))
    except ValidationError as exc:
        wrong = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        fixes = [fix for name, fix in _FIXES.items() if name in wrong]
        detail = str(validation_error(exc.errors()).body["detail"])
        raise ToolError("; ".join([detail, *fixes])) from exc


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
