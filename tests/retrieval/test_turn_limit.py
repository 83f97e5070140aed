"""The one size limit of a turn (``retrieval.turn_limit``), checked where every round is
validated: user_message and assistant_reply together, in UTF-8 bytes, exact at the edge."""

from __future__ import annotations

import pytest

from memstrata.errors import InvalidContentError
from memstrata.retrieval.rounds import Round, validate_round
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES

FIX = "split the text over several turns, each part with the next turn_index"


def refusal(user_message: str, assistant_reply: str = "") -> InvalidContentError:
    with pytest.raises(InvalidContentError) as info:
        validate_round(Round("s", 0, user_message, assistant_reply))
    return info.value


@pytest.mark.parametrize(
    ("character", "size"),
    [("a", 1), ("é", 2), ("中", 3), ("😀", 4)],
)
def test_a_turn_of_exactly_the_limit_passes_and_one_byte_more_does_not(
    character: str, size: int
) -> None:
    """Counted in UTF-8 bytes, whatever the characters: 65,536 emoji are the limit."""
    whole = character * (MAX_TURN_BYTES // size) + "a" * (MAX_TURN_BYTES % size)
    assert len(whole.encode()) == MAX_TURN_BYTES
    assert validate_round(Round("s", 0, whole)).text == f"User: {whole}"
    error = refusal(whole + "a")
    assert str(error) == (
        f"user_message is {MAX_TURN_BYTES + 1} bytes, over the limit of {MAX_TURN_BYTES} "
        f"bytes (UTF-8) for one turn's user_message and assistant_reply; {FIX}"
    )
    assert error.field == "user_message"


def test_the_two_texts_count_together() -> None:
    half = "x" * (MAX_TURN_BYTES // 2)
    assert validate_round(Round("s", 0, half, half)).text.count("x") == MAX_TURN_BYTES
    error = refusal(half, half + "y")
    assert str(error).startswith(
        f"user_message and assistant_reply are {MAX_TURN_BYTES + 1} bytes together, over the "
        f"limit of {MAX_TURN_BYTES} bytes"
    )
    assert error.field is None  # neither alone is at fault


def test_a_reply_alone_over_the_limit_is_named() -> None:
    error = refusal("", "r" * (MAX_TURN_BYTES + 5))
    assert str(error).startswith(f"assistant_reply is {MAX_TURN_BYTES + 5} bytes, over the")
    assert error.field == "assistant_reply"


def test_a_round_without_text_names_the_fields_to_send() -> None:
    error = refusal("  ", "\n")
    assert str(error) == (
        "a round needs user_message or assistant_reply (or both); both are empty or blank"
    )
    assert error.field is None
