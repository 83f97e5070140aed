"""BM25 terms stored beside each row, so loading a user's index does not re-tokenise.

Tokenising every chunk was most of the first search of a large user (docs/BENCHMARKS.md).
A row's ``bm25_terms`` is ``<signature>\\t<term> <term> …``: the signature names the rules
that made the terms (``TERMS_VERSION`` and the bigram switch), and a row written under other
rules — or before the column existed — is tokenised again when it is loaded, so a change
of rules never serves stale terms (the row gets new terms when its text is written again).
Terms never hold whitespace, so one space separates them.

A conversation round's terms also name the day it was said (``date_words``): a question
that names a date ("Who did Maria have dinner with on May 3, 2023?") finds rounds whose
text has none, because the date was only their timestamp. These words are terms only: the
chunk text, its preview, its vector and its 512-token size never see them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from memstrata.retrieval import tokenize as rules
from memstrata.retrieval.records import is_conversation_path

# Bump whenever the terms can differ for the same row.
# 2: combining marks join the word they are in (retrieval.marks).
# 3: case folding instead of lowercasing (ß is ss), the Arabic tatweel and the soft
#    hyphen dropped inside words.
# 4: a conversation round's date as words (date_words).
# 5: Thai, Lao, Tibetan, Myanmar and Khmer by grapheme cluster, with cluster bigrams.
TERMS_VERSION = 5

# English names, whatever the locale: the words questions were measured with (LoCoMo).
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def signature() -> str:
    return f"{TERMS_VERSION}{'b' if rules.CJK_BIGRAMS else 'u'}"


def round_day(file_path: str | None, created_at: datetime | None) -> date | None:
    """The day a row's terms name: a conversation round's UTC date, None for anything else.

    A round's time is when its text was said; a memory file's or note's is only when it was
    written, which says nothing about what the text is about. UTC because the database
    keeps the instant, not the offset it came with: the same day whether the terms are made
    at the write or again at a load, on any server time zone (a naive time is UTC, as
    everywhere in memstrata)."""
    if created_at is None or not is_conversation_path(file_path):
        return None
    if created_at.tzinfo is None:
        return created_at.date()
    return created_at.astimezone(UTC).date()


def date_words(day: date) -> str:
    """``day`` as the words a question names it by: "8 May 2023 Monday" (no ISO form:
    "2023-05-08" splits into "05" and "08", which collide with other numbers)."""
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year} {_WEEKDAYS[day.weekday()]}"


def encode_terms(text: str, day: date | None = None) -> str:
    """What to store in ``bm25_terms`` for a chunk's text (and its round's ``round_day``)."""
    return f"{signature()}\t{' '.join(_tokenize(text, day))}"


def decode_terms(stored: str | None, text: str, day: date | None = None) -> list[str]:
    """The chunk's BM25 terms: the stored ones when made under today's rules, else anew."""
    if stored is not None:
        made_by, tab, body = stored.partition("\t")
        if tab and made_by == signature():
            return body.split(" ") if body else []
    return _tokenize(text, day)


def _tokenize(text: str, day: date | None) -> list[str]:
    terms = rules.tokenize(text, cjk_bigrams=rules.CJK_BIGRAMS)
    if day is not None:
        terms += rules.tokenize(date_words(day), cjk_bigrams=False)
    return terms
