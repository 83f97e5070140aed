"""The one size limit of a conversation turn, checked where every turn is validated
(:func:`memstrata.retrieval.rounds.validate_round`): the REST single-turn and batch routes,
MCP's ``conversation_index_turn`` (stdio and HTTP) and the library all refuse alike.

A turn's ``user_message`` and ``assistant_reply`` together hold at most ``MAX_TURN_BYTES``
UTF-8 bytes: the default limit of a memory file (``MEMSTRATA_MAX_CONTENT_BYTES``), and a
quarter of the default request body (``MEMSTRATA_MAX_REQUEST_BYTES``, 1 MiB), so a turn at
the limit fits one request even with every non-ASCII character sent as a JSON ``\\u``
escape (at most 3× its UTF-8 size). Without it, a 3 MB turn over MCP stdio (no body limit)
was stored as 2,744 chunks whose embeddings all timed out and were left to the background
worker for hours. Bytes, not characters: what a turn costs (chunks, embedding calls,
rows) follows its size, and so do the body and file limits it sits beside. A constant, not
a setting: the tool schemas state it to clients, which cannot read a server's settings.
"""

from __future__ import annotations

from memstrata.errors import InvalidContentError

MAX_TURN_BYTES = 256 * 1024
TURN_FIELDS = ("user_message", "assistant_reply")
# What a schema says of each text field (JSON Schema's maxLength counts characters, and
# a text over MAX_TURN_BYTES characters is over as many bytes: a bound that never refuses
# a turn the server takes, the exact rule in words).
TURN_LIMIT_RULE = (
    f"user_message and assistant_reply together: at most {MAX_TURN_BYTES} bytes of UTF-8; "
    "split a longer text over several turns"
)


def check_turn_size(user_message: str, assistant_reply: str) -> None:
    """``InvalidContentError`` when the two texts together are over ``MAX_TURN_BYTES``
    UTF-8 bytes; its ``field`` the one that is over on its own, else None (both are)."""
    # A character is at most 4 bytes: most turns are passed without encoding them.
    if 4 * (len(user_message) + len(assistant_reply)) <= MAX_TURN_BYTES:
        return
    sizes = {
        name: len(text.encode("utf-8", "surrogatepass"))
        for name, text in zip(TURN_FIELDS, (user_message, assistant_reply), strict=True)
    }
    total = sum(sizes.values())
    if total <= MAX_TURN_BYTES:
        return
    alone = [name for name, size in sizes.items() if size > MAX_TURN_BYTES]
    field = alone[0] if alone else None
    said = (
        f"{field} is {sizes[field]} bytes"
        if field is not None and sizes[field] == total
        else f"user_message and assistant_reply are {total} bytes together"
    )
    raise InvalidContentError(
        f"{said}, over the limit of {MAX_TURN_BYTES} bytes (UTF-8) for one turn's "
        "user_message and assistant_reply; split the text over several turns, each part "
        "with the next turn_index",
        field=field,
    )
