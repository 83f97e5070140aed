"""JSON-RPC ids must be unique among one MCP session's requests in flight.

The SDK files each request's answer stream under ``str(id)`` in its session: a second
request with the id of one still running replaced the first's stream, so one of the two
never got an answer and its event stream stayed open (a ``: ping`` every 15 s) for as long
as the client waited, while its write landed. :class:`RequestIds` holds the ids in flight
per session (and user, so a stranger's request for a session id it does not own still
gets the SDK's 404, and learns nothing from a 409), and the gate refuses a duplicate at
once (:func:`duplicate_id`), before the SDK sees it. ``7`` and ``"7"`` are the same id
to the SDK, so they are here too.

An id is free again once its request's answer has ended, so a client that reuses ids one
after another is never refused: a request whose predecessor has sent its answer but not yet
returned waits the moment that takes (:data:`SETTLE_S` at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from mcp_types import INVALID_REQUEST, RequestId

from memstrata.api.errors import ApiError
from memstrata.mcp.sessions import jsonrpc_error_fields

DUPLICATE_ID = "duplicate_request_id"
# How long a request waits for a predecessor with its id that has sent its whole answer
# to return (a few event-loop turns in practice).
SETTLE_S = 1.0

_Key = tuple[str, str, str]  # user, session, str(request id)


class Held:
    """One request's hold on its id, from :meth:`RequestIds.take`."""

    def __init__(self, key: _Key) -> None:
        self.key = key
        self.answered = False  # the answer's last chunk has gone to the client
        self.done = asyncio.Event()  # the SDK's call for it has returned


class RequestIds:
    """The JSON-RPC ids of each session's requests in flight; atomic on the event loop."""

    def __init__(self) -> None:
        self._in_flight: dict[_Key, Held] = {}

    async def take(self, user_id: str, session_id: str, request_id: RequestId) -> Held | None:
        """Hold ``request_id`` for a request of the session until :meth:`give_back`; None
        when a request with that id is still unanswered."""
        key = (user_id, session_id, str(request_id))
        held = self._in_flight.get(key)
        if held is not None and held.answered:
            # Past that, it has answered all the same: the id is the client's to reuse.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(held.done.wait(), SETTLE_S)
            held = self._in_flight.get(key)
        if held is not None and not held.answered:
            return None
        mine = Held(key)
        self._in_flight[key] = mine
        return mine

    def give_back(self, held: Held) -> None:
        held.done.set()
        if self._in_flight.get(held.key) is held:
            del self._in_flight[held.key]

    def __len__(self) -> int:
        return len(self._in_flight)


def request_id_of(body: bytes) -> RequestId | None:
    """The id of the JSON-RPC request in ``body``; None for a notification or a response
    (the gate has already refused anything that is not one JSON-RPC message)."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    return request_id


def duplicate_id(request_id: RequestId) -> ApiError:
    """The 409 for a request whose id another request of the session holds unanswered
    (logged as every refusal is: :mod:`memstrata.mcp.refusal_log`)."""
    detail = (
        f"request id {request_id!r} is already used by another request of this MCP session "
        "that has not been answered yet: JSON-RPC ids must be unique among a session's "
        'requests in flight (the server tells their answers apart by id; 7 and "7" are '
        "the same id). Send this request again with an id no unanswered request uses."
    )
    return ApiError(
        409,
        detail,
        code=DUPLICATE_ID,
        extra=jsonrpc_error_fields(detail, code=INVALID_REQUEST, request_id=request_id),
    )
