"""What is wrong with an entry of ``MEMSTRATA_EMBEDDING_MODELS``, in words that show the fix.

Pydantic's own answers ("Input should be a valid dictionary or instance of
EmbeddingModelSpec", "Field required", "Extra inputs are not permitted") named neither the
fix nor an example. These rules rewrite each problem of an entry, keep its location (the
setting, the entry's position and the key: ``MEMSTRATA_EMBEDDING_MODELS[1].name``), and end
each wrong entry's last problem with a valid entry to copy (``EMBEDDING_MODEL_EXAMPLE``).
Pure functions over pydantic's error details; ``config_embedding`` applies them.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from memstrata.config_lists import EMBEDDING_MODEL_EXAMPLE, json_kind

# The error type of every rewritten problem (pydantic's own types name its wording).
ENTRY_ERROR = "embedding_model_entry"
# What a field takes, by pydantic's error type for a value of the wrong kind.
EXPECTED = {
    "string_type": "a JSON string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}
# The types pydantic gives a number of the right kind but not an accepted value (1.5 for
# a whole number, 2 for true or false): "got a JSON number" would not say what is wrong.
NUMBER_SHOWN = frozenset({"int_from_float", "bool_parsing"})


def entry_problems(
    errors: Sequence[ErrorDetails], keys: Sequence[str], required: Sequence[str]
) -> list[InitErrorDetails] | None:
    """``errors`` (relative to the list: each location starts with the entry's index)
    rewritten; None when one is about the value as a whole (not a list), whose message
    ``config_lists`` already words. ``keys`` are an entry's keys, ``required`` the ones
    it must have."""
    if not all(error["loc"] and isinstance(error["loc"][0], int) for error in errors):
        return None
    missing: dict[int | str, list[str]] = {}
    for error in errors:
        if _is_missing_key(error):
            missing.setdefault(error["loc"][0], []).append(str(error["loc"][-1]))
    problems: list[tuple[tuple[int | str, ...], object, str]] = []
    for error in errors:
        index = error["loc"][0]
        if not _is_missing_key(error):
            problems.append((tuple(error["loc"]), error["input"], problem(error, keys)))
        elif (index,) not in (loc for loc, _value, _text in problems):
            # One problem for all of an entry's missing keys, at the entry.
            text = missing_message(missing[index], required)
            problems.append(((index,), error["input"], text))
    last = {loc[0]: at for at, (loc, _value, _text) in enumerate(problems)}
    return [
        _custom(loc, value, text + (f"; {valid_entry()}" if last[loc[0]] == at else ""))
        for at, (loc, value, text) in enumerate(problems)
    ]


def duplicate_names(names: Sequence[str]) -> list[InitErrorDetails]:
    """A problem at each entry whose ``name`` an earlier entry has: a model is chosen by
    name (``MEMSTRATA_EMBEDDING_MODEL``), so the later one could never be used."""
    first: dict[str, int] = {}
    problems = []
    for index, name in enumerate(names):
        if name in first:
            problems.append(
                _custom(
                    (index, "name"),
                    name,
                    f"entry {first[name]} has the name {name!r} already: each model needs a "
                    "name of its own (the one MEMSTRATA_EMBEDDING_MODEL chooses it by)",
                )
            )
        first.setdefault(name, index)
    return problems


def problem(error: ErrorDetails, keys: Sequence[str]) -> str:
    """One problem of an entry, without the example."""
    kind, value = error["type"], error["input"]
    ctx = error.get("ctx", {})
    if kind == "model_type":  # the entry itself is no object
        return f"must be a JSON object, one model; got {given(value)}"
    if kind == "extra_forbidden":
        return f"not a key this setting takes; check its spelling ({key_hint(error['loc'], keys)})"
    if kind in EXPECTED:
        return f"must be {EXPECTED[kind]}; got {given(value, shown=kind in NUMBER_SHOWN)}"
    if kind == "greater_than_equal":
        return f"must be {ctx['ge']} or more; got {value!r}"
    if kind == "less_than_equal":
        return f"must be {ctx['le']} or less; got {value!r}"
    cause = ctx.get("error")  # a field validator's own ValueError: already says what to do
    return str(cause) if isinstance(cause, ValueError) else error["msg"]


def missing_message(missing: Sequence[str], required: Sequence[str]) -> str:
    if list(missing) == list(required):
        return f"missing {_and(missing)}, which every model needs"
    return f"missing {_and(missing)} (every model needs {_and(required)})"


def key_hint(loc: tuple[int | str, ...], keys: Sequence[str]) -> str:
    """The key meant, if one is close to the unknown one; else every key."""
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else f"a model takes {', '.join(keys)}"


def given(value: object, *, shown: bool = False) -> str:
    """What was given, in JSON's words; a list is the one collection ``json_kind`` leaves.
    ``shown``: a number is given as itself."""
    if shown and isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return json_kind(value) or "a JSON list"


def valid_entry() -> str:
    return f"a valid entry: '{EMBEDDING_MODEL_EXAMPLE}'"


def _is_missing_key(error: ErrorDetails) -> bool:
    return error["type"] == "missing" and len(error["loc"]) > 1


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _custom(loc: tuple[int | str, ...], value: object, message: str) -> InitErrorDetails:
    # The message goes in as context: a template would read its JSON braces as fields.
    error = PydanticCustomError(ENTRY_ERROR, "{message}", {"message": message})
    return {"type": error, "loc": loc, "input": value}
