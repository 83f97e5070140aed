"""Ids and the characters Unicode calls default-ignorable: drawn as nothing where they do
not belong, so ``"bob\\u3164"`` (a Hangul filler) or ``"bob\\ufe00"`` (a variation selector
after a letter) shows as ``bob``, another user's id. They are refused like the format
characters (``text.ID_REFUSED``), except where they are part of what the text shows: a
zero-width non-joiner between letters of a joining script (Persian, Hindi), a variation
selector after an emoji, an emoji's joiner, a subdivision flag's tags.
"""

from __future__ import annotations

import pytest

from memstrata.errors import InvalidContentError, InvalidUserIdError
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.session_ids import check_session_id

INVISIBLE = [
    ("bob\u3164", "character 4 is U+3164 HANGUL FILLER"),
    ("\uffa0bob", "character 1 is U+FFA0 HALFWIDTH HANGUL FILLER"),
    ("b\u115fob", "character 2 is U+115F HANGUL CHOSEONG FILLER"),
    ("bo\u034fb", "character 3 is U+034F COMBINING GRAPHEME JOINER"),
    ("bob\ufe00", "character 4 is U+FE00 VARIATION SELECTOR-1"),
    ("bob\ufe0f", "character 4 is U+FE0F VARIATION SELECTOR-16"),
    ("bob\U000e0100", "character 4 is U+E0100 VARIATION SELECTOR-17"),
    ("\u845b\U000e0100", "character 2 is U+E0100 VARIATION SELECTOR-17"),  # a glyph variant
    ("bo\u200cb", "character 3 is U+200C ZERO WIDTH NON-JOINER"),  # Latin letters never join
    ("bob\u180b", "character 4 is U+180B MONGOLIAN FREE VARIATION SELECTOR ONE"),
    ("\u200cbob", "character 1 is U+200C ZERO WIDTH NON-JOINER"),
    ("bob\u200c", "character 4 is U+200C ZERO WIDTH NON-JOINER"),
    ("1\u200c2", "character 2 is U+200C ZERO WIDTH NON-JOINER"),
    ("\U0001f3f4\U000e0067", "character 2 is U+E0067 TAG LATIN SMALL LETTER G"),
]


@pytest.mark.parametrize(("user_id", "named"), INVISIBLE)
def test_an_invisible_character_is_refused_in_both_ids_naming_it(user_id: str, named: str) -> None:
    with pytest.raises(InvalidUserIdError) as as_user:
        validate_user_id(user_id)
    with pytest.raises(InvalidContentError) as as_session:
        check_session_id(user_id)
    message = str(as_user.value)
    assert f": {named} (" in message and message.endswith("; remove it"), message
    assert "makes the id look like another one" in message
    assert message.isascii()
    assert named in str(as_session.value)


@pytest.mark.parametrize(
    "user_id",
    [
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian "I want"
        "\u0915\u094d\u200c\u0937",  # Devanagari: ZWNJ after a virama, before a letter
        "\u2764\ufe0f",  # red heart, emoji presentation
        "1\ufe0f\u20e3",  # keycap one
        "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",  # England flag
        "\u1828\u180b",  # a Mongolian letter and its free variation selector
    ],
)
def test_an_invisible_character_where_it_shapes_the_text_stays_allowed(user_id: str) -> None:
    assert validate_user_id(user_id) == user_id
    assert check_session_id(user_id) == user_id
