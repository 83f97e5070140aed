"""BM25 terms stored beside each row, so loading a user's index does not re-tokenise.

Tokenising every chunk was most of the first search of a large user (docs/BENCHMARKS.md).
A row's ``bm25_terms`` is ``<signature>\\t<term> <term> …``: the signature names the rules
that made the terms (``TERMS_VERSION`` and the bigram switch), and a row written under other
rules — or before the column existed — is tokenised again when it is loaded, so a change
of rules never serves stale terms (the row gets new terms when its text is written again).
Terms never hold whitespace, so one space separates them.
"""

from __future__ import annotations

from memstrata.retrieval import tokenize as rules

# Bump whenever tokenize() can give another output for the same text.
# 2: combining marks join the word they are in (retrieval.marks).
# 3: case folding instead of lowercasing (ß is ss), the Arabic tatweel and the soft
#    hyphen dropped inside words.
TERMS_VERSION = 3


def signature() -> str:
    return f"{TERMS_VERSION}{'b' if rules.CJK_BIGRAMS else 'u'}"


def encode_terms(text: str) -> str:
    """What to store in ``bm25_terms`` for a chunk's text."""
    return f"{signature()}\t{' '.join(_tokenize(text))}"


def decode_terms(stored: str | None, text: str) -> list[str]:
    """The chunk's BM25 terms: the stored ones when made under today's rules, else anew."""
    if stored is not None:
        made_by, tab, body = stored.partition("\t")
        if tab and made_by == signature():
            return body.split(" ") if body else []
    return _tokenize(text)


def _tokenize(text: str) -> list[str]:
    return rules.tokenize(text, cjk_bigrams=rules.CJK_BIGRAMS)
