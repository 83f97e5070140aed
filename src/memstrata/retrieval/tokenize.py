"""Offline, deterministic tokenisation for BM25 and token budgets.

Two different jobs live here, and they deliberately use different rules:

``tokenize`` produces *index terms*. The spec asks for Chinese character by character and
English word by word with no external dependency, because a per-user memory index must not
need a segmentation dictionary or a network call. CJK ideographs, kana and hangul become one
term per character; every other maximal run of Unicode letters/digits (with the combining
marks inside it, so Hindi or Bengali words stay whole) becomes one lowercase term (so
``don't`` is ``don`` + ``t``, and ``3.14`` is ``3`` + ``14``). Text is NFKC-normalised
first so full-width ``ＧＰＴ４`` and ``GPT4`` index identically. English terms then go
through ``light_stem`` (plural and -ed/-ing stripping only; other scripts are untouched)
and an English stopword list is removed, because on conversational data words like "the",
"I" or "did" appear in nearly every turn, carry almost no BM25 weight, and their long
postings are what make queries slow. Both were measured on LoCoMo (docs/BENCHMARKS.md):
BM25 recall@10 rose from 0.5245 (Lucene's stop set, no stemming) to 0.597.

``count_tokens`` *estimates LLM tokens* for the 512-token chunk size and the system-prompt
budget. No tokenizer model ships with memstrata, so the rule approximates byte-level BPE
tokenizers (cl100k / o200k style):

* whitespace costs nothing;
* a maximal run of ASCII letters costs ``ceil(len / 4)``;
* a maximal run of ASCII digits costs ``ceil(len / 3)`` (BPE vocabularies split numbers
  into groups of at most three digits);
* a maximal run of other letters/digits, excluding CJK (accented Latin, Cyrillic, Greek,
  Arabic, Thai, ...) costs ``ceil(len / 2)``, since such scripts get short BPE pieces;
* every other non-whitespace code point costs 1: each CJK ideograph, kana or hangul
  syllable, each punctuation mark or symbol;
* on top of that, a pictograph of the arrows-to-miscellaneous-symbols blocks
  (U+2190-U+2BFF), a variation selector or a zero-width joiner costs 1 more, and a code
  point outside the Basic Multilingual Plane that is not CJK (most emoji) 2 more: byte-level
  vocabularies hold few of them, so cl100k spends 2-3 tokens on each (``👍`` 3,
  ``👨‍👩‍👧`` 13).

Measured against the real cl100k and o200k vocabularies (``benchmarks/token_estimate.py``,
docs/BENCHMARKS.md "Token estimate"), the estimate errs high on English conversation for
both, and on Chinese for o200k, but counts Chinese text about 25 % (at most ~55 %) under
cl100k, which spends more than one token on many ideographs. A host whose model's tokenizer
matters passes it as ``count`` (``Memstrata.open_agent_session``).

Because every cost depends only on maximal runs of one character class or on single code
points, the count of any prefix is at most the count of the whole text, which
binary-search truncation relies on, and joining two texts with whitespace adds their counts
exactly.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container

from memstrata.retrieval.marks import MARKS, MARKS_ASTRAL, MARKS_BMP

__all__ = ["CJK_BIGRAMS", "ENGLISH_STOPWORDS", "count_tokens", "light_stem", "tokenize"]

# Code points that are indexed one per character and cost one LLM token each: CJK
# ideographs (URO, Ext A, Ext B–I, compatibility), iteration marks, kana (without the
# katakana punctuation U+30A0 and U+30FB) and hangul. Literal characters, not escapes, so
# the string can be spliced into character classes.
_CJK = (
    "\u3005\u3007"
    "\u3041-\u309f"
    "\u30a1-\u30fa\u30fc-\u30ff"
    "\u31f0-\u31ff"
    "\u3400-\u4dbf"
    "\u4e00-\u9fff"
    "\uf900-\ufaff"
    "\uff66-\uff9f"
    "\u1100-\u11ff"
    "\u3130-\u318f"
    "\uac00-\ud7af"
    "\U00020000-\U0002ebef"
    "\U00030000-\U000323af"
)

# One CJK character, or a maximal run of letters/digits that are not CJK and not "_",
# with the combining marks inside it (``marks.MARKS``): Python's ``\w`` has no marks, so
# हिन्दी was cut into ह, न, द — fragments unrelated words share.
_TERM_WITH_MARKS = re.compile(f"[{_CJK}]|[^\\W_{_CJK}](?:[^\\W_{_CJK}]|[{MARKS}])*")
# The same terms for text without marks or joiners (nearly all English and Chinese), at
# about half the cost: the alternation above is slow, and looking for a mark is not.
_TERM = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")
_BMP_MARK_OR_JOINER = re.compile(f"[{MARKS_BMP}\u200c\u200d]")
_ASTRAL_MARK = re.compile(f"[{MARKS_ASTRAL}]")
# Dropped before splitting, so a word is one term with or without them: joiners inside a
# word (Indic conjuncts) and variation selectors (emoji or text style) shape glyphs, not
# meaning; and the vowel points Arabic (harakat) and Hebrew (niqqud) text mostly leaves
# out, so pointed and unpointed spellings of a word match. (U+05BE, U+05C0, U+05C3 and
# U+05C6 in the Hebrew range are punctuation, not points.)
_HEBREW_POINTS = [c for c in range(0x0591, 0x05C8) if c not in (0x05BE, 0x05C0, 0x05C3, 0x05C6)]
_GLYPH_ONLY = [0x200C, 0x200D, *range(0xFE00, 0xFE10)]
_DROPPED = dict.fromkeys([*_GLYPH_ONLY, *range(0x064B, 0x0660), 0x0670, *_HEBREW_POINTS], None)

# Two or more CJK characters in a row: their adjacent pairs become extra terms.
_CJK_RUN = re.compile(f"[{_CJK}]{{2,}}")

# Whether CJK text also yields character bigrams (see ``tokenize``); decided by measurement
# on MADial-Bench (docs/BENCHMARKS.md).
CJK_BIGRAMS = True

# findall() yields exactly one match per estimated token: greedy {1,n} repetition cuts a
# maximal run of length L into ceil(L / n) matches, and "\S" catches everything else
# (including CJK, which the other classes exclude) one code point at a time.
_PIECE = re.compile(f"[A-Za-z]{{1,4}}|[0-9]{{1,3}}|[^\\W\\x00-\\x7f{_CJK}]{{1,2}}|\\S")
# Surcharges on top of ``_PIECE`` (module doc): BMP pictographs, variation selectors and
# the zero-width joiner one token more, astral code points that are not CJK two more.
_PICTOGRAPH = re.compile("[\u2190-\u2bff\ufe00-\ufe0f\u200d]")
_ASTRAL_NOT_CJK = re.compile("[\U00010000-\U0001ffff\U0002ebf0-\U0002ffff\U000323b0-\U0010ffff]")

# Lucene's classic English stop set, plus "s" and "t" (which splitting on apostrophes makes
# of "it's" and "don't"), plus the pronouns, auxiliaries and question words that fill
# conversational text and questions ("what did you say when I ..."). Measured on the LoCoMo
# dev set (docs/BENCHMARKS.md): the Lucene set alone gave BM25 recall@10 0.5245; this
# set with ``light_stem`` gives more.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
        "is", "it", "no", "not", "of", "on", "or", "s", "such", "t", "that", "the", "their",
        "then", "there", "these", "they", "this", "to", "was", "will", "with",
        "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours",
        "yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers",
        "herself", "its", "itself", "them", "theirs", "themselves", "what", "which", "who",
        "whom", "those", "am", "were", "been", "being", "have", "has", "had", "having", "do",
        "does", "did", "doing", "because", "until", "while", "about", "against", "between",
        "through", "during", "before", "after", "above", "below", "from", "up", "down", "out",
        "off", "over", "under", "again", "further", "once", "here", "when", "where", "why",
        "how", "all", "any", "both", "each", "few", "more", "most", "other", "some", "nor",
        "only", "own", "same", "so", "than", "too", "very", "can", "just", "don", "should",
        "now", "would", "could", "also", "ll", "re", "ve", "d", "m",
    }
)  # fmt: skip

_VOWEL = re.compile("[aeiouy]")


def light_stem(term: str) -> str:
    """A tiny English suffix stripper so ``adopted``/``adopt`` and ``dogs``/``dog`` match.

    Only lowercase ASCII words change: ``-ies`` → ``-y``, ``-es`` after s/x/z/ch/sh, ``-s``
    (not ``-ss``/``-us``/``-is``), and ``-ing``/``-ed`` when at least four letters with a
    vowel remain (undoubling a final consonant: ``running`` → ``run``). Deliberately
    conservative: a missed conflation costs little, a wrong one merges unrelated words.
    """
    if not term.isascii() or not term.isalpha() or len(term) < 4:
        return term
    if term.endswith("ies") and len(term) > 4:
        return term[:-3] + "y"
    if term.endswith("es") and term[:-2].endswith(("s", "x", "z", "ch", "sh")):
        return term[:-2]
    if term.endswith("s") and not term.endswith(("ss", "us", "is")):
        return term[:-1]
    for suffix in ("ing", "ed"):
        if term.endswith(suffix):
            stem = term[: -len(suffix)]
            if len(stem) >= 4 and _VOWEL.search(stem):
                if stem[-1] == stem[-2] and stem[-1] not in "lsz":
                    stem = stem[:-1]
                return stem
    return term


# Raw term -> index term ("" for a stopword) under the default settings. Loading a user's
# index tokenises every chunk, and stemming each word anew was most of a cold load; the
# vocabulary of real text is small, and the map is dropped whole if it ever grows large.
_DEFAULT_TERMS: dict[str, str] = {}
_DEFAULT_TERMS_MAX = 500_000


def _default_terms(raw: list[str]) -> list[str]:
    memo = _DEFAULT_TERMS
    missing = set(raw).difference(memo)
    if missing:
        if len(memo) + len(missing) > _DEFAULT_TERMS_MAX:
            memo.clear()
        for term in missing:
            memo[term] = "" if term in ENGLISH_STOPWORDS else light_stem(term)
    mapped = list(map(memo.get, raw))
    if None in mapped:  # cleared meanwhile by another thread: do it the slow way
        mapped = ["" if t in ENGLISH_STOPWORDS else light_stem(t) for t in raw]
    return list(filter(None, mapped))


def tokenize(
    text: str,
    stopwords: Container[str] = ENGLISH_STOPWORDS,
    *,
    stem: bool = True,
    cjk_bigrams: bool = CJK_BIGRAMS,
) -> list[str]:
    """Split ``text`` into BM25 terms; pass ``stopwords=frozenset()`` to keep every word
    and ``stem=False`` to keep English words as written.

    With ``cjk_bigrams`` every pair of adjacent CJK characters is an extra term, next to
    the per-character terms the spec asks for: single characters of Chinese are very
    ambiguous (``乌`` of ``乌龙茶``), and a matching pair is much stronger evidence.

    Use the same settings for documents and queries, or stopped query words will never
    match (and unstopped document words will skew lengths).
    """
    normal = unicodedata.normalize("NFKC", text).lower()
    if not _has_marks(normal):
        terms = _TERM.findall(normal)
    else:
        # str.lower() makes Turkish İ "i" + a combining dot: İşte must match işte.
        normal = normal.replace("i\u0307", "i").translate(_DROPPED)
        terms = _TERM_WITH_MARKS.findall(normal)
    if stopwords is ENGLISH_STOPWORDS and stem:
        terms = _default_terms(terms)
    else:
        if stopwords:
            terms = [term for term in terms if term not in stopwords]
        if stem:
            terms = [light_stem(term) for term in terms]
    if cjk_bigrams:
        for run in _CJK_RUN.findall(normal):
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def _has_marks(text: str) -> bool:
    if text.isascii():  # O(1) in CPython: a flag of the string
        return False
    if _BMP_MARK_OR_JOINER.search(text) is not None:
        return True
    return max(text) > "\uffff" and _ASTRAL_MARK.search(text) is not None


def count_tokens(text: str) -> int:
    """Estimate the LLM tokens in ``text`` using the rule in the module docstring."""
    return (
        len(_PIECE.findall(text))
        + len(_PICTOGRAPH.findall(text))
        + 2 * len(_ASTRAL_NOT_CJK.findall(text))
    )
