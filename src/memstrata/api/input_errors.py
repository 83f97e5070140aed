"""What a request body or a tool's arguments got wrong, in the reader's words: one rule per
kind of mistake, shared by the REST API's 422s (:mod:`memstrata.api.validation_errors`) and
the MCP tools' refusals (:mod:`memstrata.mcp.tool_args`), each transport adding only its
framing.

Pydantic's own words ("Extra inputs are not permitted", "Field required", "Input should be
a valid dictionary or object to extract fields from") say neither what to send nor use the
reader's terms, where the in-process agent tools already said "unknown argument(s) topk;
memory_search takes query, top_k, sources" and "missing required argument(s): query". A
message a validator of ours worded (a ``PydanticCustomError``: the ``version`` field's, the
ISO 8601 hint) is kept, as is one of a kind no rule here covers: :func:`reworded` gives
None for both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from pydantic import BaseModel
from pydantic_core import PydanticKnownError
from pydantic_core.core_schema import ErrorType
from starlette.types import Scope

from memstrata.agent import json_numbers
from memstrata.agent.json_numbers import shown
from memstrata.errors import InvalidContentError, ToolInputError

_SHOWN_NAME_CHARS = 40  # of an unknown field's name, as a refusal echoes it

# JSON's names for what a client sent instead of a string or an object (bool before int:
# True is an int).
_JSON_KINDS = (
    (bool, "a boolean"),
    (str, "a string"),
    ((int, float), "a number"),
    (list, "an array"),
    (dict, "an object"),
    (type(None), "null"),
)


def json_kind(value: object) -> str:
    """What a JSON value is, in words: "a number", "an array" …"""
    return next((name for types, name in _JSON_KINDS if isinstance(value, types)), "a value")


@dataclass(frozen=True)
class Taker:
    """What the input is given to, as a refusal names it: ``name`` ("this body",
    "memory_read"), ``noun`` for one of its inputs ("field", "argument(s)"), ``whole`` for
    all of them, and ``model``, whose fields, bounds and required fields the messages
    quote (None: unknown, e.g. a body outside the routes)."""

    name: str
    noun: str
    model: type[BaseModel] | None = None
    whole: str = "the body"

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(_properties(self.model)) if self.model is not None else ()


def body_taker(scope: Scope | None) -> Taker | None:
    """The body the request's route takes (its pydantic model), as a 422 names it."""
    route = scope.get("route") if scope is not None else None
    field = getattr(route, "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    return Taker("this body", "field", model)


def content_item(exc: InvalidContentError, body: Taker | None) -> dict[str, Any]:
    """The 422 ``errors`` item of a service's refusal: the ``loc`` of the field the
    exception names (``InvalidContentError.field``, which every check that knows its input
    passes), else the whole body's. A field the body does not have is the whole body's
    too: the library's name for an input need not be the route's."""
    field = exc.field
    if field is not None and body is not None and field not in body.fields:
        field = None
    return {"loc": ["body", field] if field else ["body"], "msg": str(exc), "type": "value_error"}


def unknown(names: Sequence[str], taker: Taker) -> str:
    """Inputs ``taker`` does not take, and those it does."""
    said = f"unknown {taker.noun} {', '.join(_name(n) for n in names)}"
    if taker.model is None:
        return said
    takes = ", ".join(taker.fields) or f"no {taker.noun.removesuffix('(s)')}s"
    return f"{said}; {taker.name} takes {takes}"


def missing(names: Sequence[str], taker: Taker) -> str:
    """Required inputs left out."""
    return f"missing required {taker.noun}: {', '.join(names)}"


def reworded(error: Mapping[str, Any], taker: Taker) -> str | None:
    """One pydantic error (``loc`` relative to ``taker``'s input) in the reader's words;
    None when its message is ours already or no rule covers its kind (module doc)."""
    kind = str(error.get("type", ""))
    rule = _RULES.get(kind)
    if rule is None or not _pydantic_words(error):
        return None
    place = tuple(error.get("loc", ()))
    return rule(_Error(place, error.get("input"), error.get("ctx") or {}, taker))


@dataclass(frozen=True)
class _Error:
    place: tuple[str | int, ...]
    value: Any
    ctx: Mapping[str, Any]
    taker: Taker

    @property
    def path(self) -> str:
        """``sources[0]``, ``clientInfo.version``."""
        text = ""
        for part in self.place:
            text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
        return text

    @property
    def spec(self) -> Mapping[str, Any]:
        """The field's JSON Schema, if it is one of the taker's own."""
        if len(self.place) != 1 or self.taker.model is None:
            return {}
        spec: Mapping[str, Any] = _properties(self.taker.model).get(str(self.place[0]), {})
        return spec


def _pydantic_words(error: Mapping[str, Any]) -> bool:
    """Whether the message is pydantic's own for its type (not a validator's of ours)."""
    try:
        kind = cast("ErrorType", str(error.get("type")))  # an unknown one raises KeyError
        own = PydanticKnownError(kind, error.get("ctx")).message()
    except (KeyError, TypeError, ValueError):
        return False
    return own == error.get("msg")


def _missing(e: _Error) -> str:
    if not e.place:
        return f"{e.taker.whole} is empty: send a JSON object such as {_example(e.taker)}"
    return missing([e.path], e.taker)


def _extra(e: _Error) -> str:
    if len(e.place) == 1:
        return unknown([str(e.place[0])], e.taker)
    return unknown([e.path], Taker(e.taker.name, e.taker.noun))  # inside: no list to give


def _not_an_object(e: _Error) -> str:
    if not e.place:
        return (
            f"{e.taker.whole} must be a JSON object such as {_example(e.taker)}, "
            f"not {json_kind(e.value)}"
        )
    return f"{e.path} must be a JSON object; got {shown(e.value)}"


def _too_long(e: _Error) -> str:
    most, sent = e.ctx.get("max_length"), e.ctx.get("actual_length")
    return (
        f"at most {most} {e.path} per request, got {sent}: split them into requests of "
        f"{most} or fewer"
    )


def _too_short(e: _Error) -> str:
    least, sent = e.ctx.get("min_length"), e.ctx.get("actual_length")
    if sent:
        return f"{e.path} has {sent} items; at least {least} are needed"
    optional = e.taker.model is not None and e.path not in _required(e.taker.model)
    return f"{e.path} is an empty list: send at least {least}" + (
        ", or leave it out" if optional and len(e.place) == 1 else ""
    )


def _string_too_short(e: _Error) -> str:
    least, sent = e.ctx.get("min_length"), len(e.value) if isinstance(e.value, str) else 0
    if not sent:
        return f"{e.path} is empty"
    return f"{e.path} is {sent} characters; at least {least} are needed"


def _not_a_string(e: _Error) -> str:
    return f"{e.path} must be a JSON string; got {shown(e.value)}"


def _not_a_boolean(e: _Error) -> str:
    return f"{e.path} must be true or false (a JSON boolean); got {shown(e.value)}"


def _not_listed(e: _Error) -> str:
    return f"{e.path} must be {e.ctx.get('expected')}; got {shown(e.value)}"


def _integer(e: _Error) -> str:
    """The agent tools' rule for an integer (:func:`memstrata.agent.json_numbers.json_integer`:
    ``send 5, not "5"``), with the field's range where its schema states one."""
    head = f"{e.path} must be a JSON integer"
    try:
        json_numbers.json_integer(e.path, e.value)
        said = f"{head}; got {shown(e.value)}"  # 5.0 for a strict field, or out of range
    except ToolInputError as exc:
        said = str(exc)
    low, high = _bounds(e.spec)
    if low is None or not said.startswith(head):
        return said
    span = f" from {low} to {high}" if high is not None else f" of at least {low}"
    return head + span + said[len(head) :]


_RULES: dict[str, Callable[[_Error], str]] = {
    "missing": _missing,
    "extra_forbidden": _extra,
    "model_attributes_type": _not_an_object,
    "model_type": _not_an_object,
    "dict_type": _not_an_object,
    "too_long": _too_long,
    "too_short": _too_short,
    "string_too_short": _string_too_short,
    "string_type": _not_a_string,
    "bool_type": _not_a_boolean,
    "bool_parsing": _not_a_boolean,
    "literal_error": _not_listed,
    **dict.fromkeys(
        (
            "int_type",
            "int_parsing",
            "int_from_float",
            "greater_than_equal",
            "less_than_equal",
            "greater_than",
            "less_than",
        ),
        _integer,
    ),
}


def _name(name: str) -> str:
    """A field name as sent, quoted (and cut short) only when it is no plain identifier."""
    if name.isidentifier() and len(name) <= _SHOWN_NAME_CHARS:
        return name
    return shown(name)


def _bounds(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    for each in [spec, *spec.get("anyOf", ())]:
        if each.get("type") == "integer" and "minimum" in each:
            return each["minimum"], each.get("maximum")
    return None, None


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def _properties(model: type[BaseModel]) -> dict[str, Any]:
    properties: dict[str, Any] = _schema(model).get("properties", {})
    return properties


def _required(model: type[BaseModel]) -> list[str]:
    required: list[str] = _schema(model).get("required", [])
    return required


# A value of each JSON Schema type, as an example body shows it.
_EXAMPLE_VALUES = {
    "string": '"…"',
    "integer": "0",
    "boolean": "true",
    "array": "[…]",
    "object": "{…}",
}


def _example(taker: Taker) -> str:
    """A JSON object of the model's required fields, e.g. ``{"content": "…"}``."""
    if taker.model is None:
        return "{…}"
    properties = _properties(taker.model)
    shown_fields = [
        f'"{name}": {_EXAMPLE_VALUES.get(_type(properties[name]), "…")}'
        for name in _required(taker.model)
    ]
    return "{" + ", ".join(shown_fields) + "}" if shown_fields else "{}"


def _type(spec: Mapping[str, Any]) -> str:
    """A field's JSON type; a reference to a model's schema is an object."""
    return "object" if "$ref" in spec else str(spec.get("type", ""))
