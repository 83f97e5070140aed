"""The 422 ``validation_error`` answers: what a request's body got wrong.

Pydantic's errors, each in the reader's words (:mod:`memstrata.api.input_errors`); a body
``json.loads`` cannot decode (not UTF-8, nested too deeply, a number too long); a body not
sent as ``application/json``. ``api.errors`` maps exceptions to these; the route class
(:mod:`memstrata.api.routing`) rewrites an unparsed body's errors with them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memstrata.api.error_shape import HttpError, http_error
from memstrata.api.input_errors import Taker, reworded
from memstrata.text import character_at


def undecodable_body(exc: StarletteHTTPException) -> HttpError | None:
    """FastAPI answers a body that ``json.loads`` refuses with anything but a
    ``JSONDecodeError`` with its own 400 "There was an error parsing the body" (the cause
    chained): the same 422 as malformed JSON here, saying what to fix."""
    cause = exc.__cause__
    if exc.status_code != 400 or not isinstance(cause, ValueError | RecursionError):
        return None
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start : cause.start + 1].hex() or "??"
        msg = (
            f"the body must be UTF-8 JSON: byte 0x{byte} at offset {cause.start} is not "
            "UTF-8 (text in Latin-1 or another encoding?)"
        )
    elif isinstance(cause, RecursionError):
        msg = (
            "the body's JSON is nested too deeply to decode (arrays or objects hundreds of "
            "levels inside each other); no memstrata request nests more than a few levels"
        )
    elif "integer string conversion" in str(cause):
        msg = (
            f"a number in the body is too long to decode (over {sys.get_int_max_str_digits()} "
            "digits); send numbers in the documented ranges"
        )
    else:
        msg = f"the body could not be decoded as JSON: {cause}"
    return _validation_detail([{"loc": ["body"], "msg": msg, "type": "json_invalid"}])


def unparsed_body_error(
    exc: RequestValidationError, content_type: str | None
) -> RequestValidationError:
    """``exc`` (its body left as bytes: FastAPI decodes JSON only when the Content-Type says
    JSON) with the body's errors replaced by one that says to send ``application/json``,
    instead of pydantic's "Input should be a valid dictionary"."""
    sent = f"as {content_type[:80]!r}" if content_type else "without a Content-Type"
    msg = f"the body was sent {sent}, not as JSON: send it with Content-Type: application/json"
    kept = [e for e in exc.errors() if not (isinstance(e, Mapping) and _in_body(e))]
    item = {"loc": ("body",), "msg": msg, "type": "content_type"}
    return RequestValidationError([item, *kept], body=exc.body)


def _in_body(error: Mapping[str, Any]) -> bool:
    loc = error.get("loc")
    return isinstance(loc, Sequence) and len(loc) > 0 and loc[0] == "body"


def validation_error(errors: Sequence[Any], body: Taker | None = None) -> HttpError:
    """422 with a one-line summary and the pydantic errors (without echoing the input),
    each in the reader's words (:mod:`memstrata.api.input_errors`)."""
    items = [_error_item(error, body) for error in errors if isinstance(error, Mapping)]
    return _validation_detail([item for item, _ in items], [line for _, line in items])


def _validation_detail(items: list[dict[str, Any]], lines: list[str] | None = None) -> HttpError:
    """``lines``: each item as the summary says it (default: its ``loc`` and ``msg``)."""
    if lines is None:
        lines = [_located(item) for item in items]
    summary = "; ".join(lines[:5])
    return http_error(422, f"invalid request: {summary or 'malformed body'}", errors=items)


def _located(item: Mapping[str, Any]) -> str:
    return f"{'.'.join(str(part) for part in item['loc']) or 'request'}: {item['msg']}"


def _error_item(error: Mapping[str, Any], body: Taker | None) -> tuple[dict[str, Any], str]:
    """The ``errors`` item of one pydantic error (its ``loc`` and ``type`` as pydantic
    gave them) and its line in the summary: a reworded message names its field itself,
    any other is said under its ``loc``."""
    place = tuple(error.get("loc", ()))
    loc = [str(part) for part in place]
    msg = str(error.get("msg", "invalid value"))
    kind = str(error.get("type", "value_error"))
    if kind == "json_invalid":  # FastAPI puts the character offset (0-based) in loc
        ctx = error.get("ctx")
        reason = ctx.get("error") if isinstance(ctx, Mapping) else None
        offset = int(place[-1]) if len(place) > 1 and isinstance(place[-1], int) else 0
        msg = f"malformed JSON at {character_at(offset)}: {reason or msg}"
        loc = ["body"]
    said = reworded({**error, "loc": place[1:]}, body or _ANY_BODY) if loc[:1] == ["body"] else None
    item = {"loc": loc, "msg": said or msg, "type": kind}
    return item, said or _located(item)


_ANY_BODY = Taker("this body", "field")  # a body outside memstrata's routes: fields unknown
