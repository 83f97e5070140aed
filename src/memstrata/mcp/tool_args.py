"""A tool's arguments parsed with the REST API's rules for each mistake
(:mod:`memstrata.api.input_errors`) in the agent tools' framing ("unknown argument(s) foo;
memory_read takes name, …", "missing required argument(s): name"), and the JSON Schemas
the catalogue states for a tool's arguments and result.

Integer arguments are read as JSON Schema reads them, by the agent tools' rule
(:func:`integer_arguments`, :mod:`memstrata.agent.json_numbers`): ``5.0`` is an integer
there, and a model's client may well send it so; ``5.5``, ``true`` and ``"5"`` are not,
and are refused with the value sent (and for ``"5"``, what to send instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memstrata.agent import json_numbers
from memstrata.agent.schemas import without_null_optionals
from memstrata.api.input_errors import Taker, missing, reworded, unknown
from memstrata.errors import ToolInputError
from memstrata.mcp.base import ToolError

M = TypeVar("M", bound=BaseModel)

# How to fix an argument whose message says only what is wrong ("missing required
# argument(s): expected_version"). The timestamp's own message gives its format already.
_FIXES = {
    "expected_version": "call memory_read first and pass the version it returns as "
    "expected_version (0 for a file that does not exist yet)",
    "skill_name": "pass a name from skills_list",
}


def integer_arguments(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The agent tools' rule for integer arguments
    (:func:`memstrata.agent.json_numbers.integer_arguments`), its refusal a ``ToolError``."""
    try:
        return json_numbers.integer_arguments(arguments, schema)
    except ToolInputError as exc:
        raise ToolError(str(exc)) from exc


def parse_arguments(model: type[M], arguments: dict[str, Any], tool: str) -> M:
    """``arguments`` of ``tool`` as ``model``, else a ``ToolError`` saying every mistake."""
    optional = {name for name, f in model.model_fields.items() if not f.is_required()}
    arguments = integer_arguments(arguments, _schema(model))
    try:
        return model.model_validate(without_null_optionals(arguments, optional))
    except ValidationError as exc:
        errors = exc.errors()
        wrong = {str(e["loc"][0]) for e in errors if e["loc"]}
        fixes = [fix for name, fix in _FIXES.items() if name in wrong]
        taker = Taker(tool, "argument(s)", model, whole="the arguments")
        raise ToolError("; ".join([*refusals(errors, taker), *fixes])) from exc


def refusals(errors: Sequence[Mapping[str, Any]], taker: Taker) -> list[str]:
    """What is wrong with a call, one line per mistake: the unknown arguments in one line,
    as the agent tools say them, then the missing ones, then each other mistake."""
    unknowns: list[str] = []
    missings: list[str] = []
    others: list[str] = []
    for error in errors:
        place = [str(part) for part in error["loc"]]
        said = reworded(error, taker)
        if said is not None and len(place) == 1 and error["type"] == "extra_forbidden":
            unknowns.append(place[0])
        elif said is not None and len(place) == 1 and error["type"] == "missing":
            missings.append(place[0])
        else:
            others.append(said or f"{'.'.join(place)}: {error['msg']}")
    return [
        *([unknown(unknowns, taker)] if unknowns else []),
        *([missing(sorted(missings, key=_order(taker)), taker)] if missings else []),
        *others,
    ]


def _order(taker: Taker) -> Callable[[str], int]:
    """Sorting key: an argument's place in the taker's schema (pydantic reports missing
    ones in its own order)."""
    fields = taker.fields
    return lambda name: fields.index(name) if name in fields else len(fields)


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
