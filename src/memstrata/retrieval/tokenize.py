"""Offline, deterministic tokenisation for BM25 and token budgets.

Two different jobs live here, and they deliberately use different rules:

``tokenize`` produces *index terms*. The spec asks for Chinese character by character and
English word by word with no external dependency, because a per-user memory index must not
need a segmentation dictionary or a network call. CJK ideographs, kana and hangul become one
term per character. Thai, Lao, Tibetan, Myanmar and Khmer have no spaces between words
either, so a run of their letters and marks becomes one term per grapheme cluster
(``regex``'s ``\\X``: a consonant with its vowel signs and tone marks, never split, so
``ข้าว`` is ``ข้`` + ``า`` + ``ว``), like a CJK character; a word of them then matches
inside a longer unspaced sentence, which with a term per run, or per piece between marks,
it did only by chance. Every other maximal run of Unicode letters/digits (with the combining marks
inside it, so Hindi or Bengali words stay whole) becomes one case-folded term (so
``don't`` is ``don`` + ``t``, ``3.14`` is ``3`` + ``14``, and Thai ``๒๕๖๗`` is one
term). Text is NFKC-normalised first so full-width ``ＧＰＴ４`` and ``GPT4`` index
identically, and case-folded rather than lowercased (``Fußball`` and ``FUSSBALL`` are one
term). English terms then go through ``light_stem`` (plural and -ed/-ing stripping only;
other scripts are untouched) and an English stopword list is removed, because on
conversational data words like "the", "I" or "did" appear in nearly every turn, carry
almost no BM25 weight, and their long postings are what make queries slow. Both were
measured on LoCoMo (docs/BENCHMARKS.md): BM25 recall@10 rose from 0.5245 (Lucene's stop
set, no stemming) to 0.597.

``count_tokens`` *estimates LLM tokens* for the 512-token chunk size and the system-prompt
budget. No tokenizer model ships with memstrata, so the rule approximates byte-level BPE
tokenizers (cl100k / o200k style):

* whitespace costs what byte-level BPE spends on it: a lone space or tab before a word or
  a mark joins it and a line break is free, but a run of two or more spaces or tabs
  (indentation, aligned comments, padded table cells) costs 1, and the space or tab right
  before a digit costs 1 of its own (the vocabularies never join a space to a digit, so
  ``x = 1`` is four tokens and a Markdown table row pays for every padded number);
* a maximal run of ASCII letters costs ``ceil(len / 4)``;
* a maximal run of ASCII digits costs ``ceil(len / 3)`` (BPE vocabularies split numbers
  into groups of at most three digits);
* a maximal run of Latin or Cyrillic letters beyond ASCII (``é``, ``ß``, ``ж``) costs
  ``ceil(len / 2)``;
* every other non-whitespace code point costs 1: each CJK ideograph, kana or hangul
  syllable, each punctuation mark or symbol, each full-width digit, each code point
  (letter, mark or sign) of Greek, Hebrew, Arabic and Thai;
* on top of that, by what the real vocabularies spend on them: half a token more per code
  point (``ceil(len / 2)`` more for a maximal run) for Devanagari, Bengali, Tamil,
  Malayalam and Khmer; 1 more per code point for Gurmukhi, Gujarati, Telugu, Kannada,
  Sinhala, Lao, Tibetan, Myanmar, Georgian and full-width Latin letters; 2 more for Odia
  and Ethiopic; and a letter of any other script costs its UTF-8 length (1 more below
  U+0800: Armenian, Syriac; 2 more above), the most a byte-level vocabulary spends on a
  character it has no pieces for;
* a pictograph of the arrows-to-miscellaneous-symbols blocks (U+2190-U+2BFF), a variation
  selector or a zero-width joiner costs 1 more, and a code point outside the Basic
  Multilingual Plane that is not CJK (most emoji) 2 more: byte-level vocabularies hold few
  of them, so cl100k spends 2-3 tokens on each (``👍`` 3, ``👨‍👩‍👧`` 13).

Measured against the real cl100k and o200k vocabularies (``benchmarks/token_estimate.py``,
docs/BENCHMARKS.md "Token estimate"), the estimate errs high on English conversation for
both, and on Chinese for o200k, but counts Chinese text about 25 % (at most ~55 %) under
cl100k, which spends more than one token on many ideographs. Every other script measured
(27 languages) is counted at most as far under cl100k as Chinese (Korean 21 %, Hebrew
14 %, Ukrainian 18 %; most err high), and all of them high for o200k, which has far more
pieces for them (Hindi: real / estimate 0.81 under cl100k, 0.24 under o200k). A host whose
model's tokenizer matters passes it as ``count`` (``Memstrata.open_agent_session``).

On code, Markdown tables, JSON and URLs it errs high or at most 10 % under cl100k (code
lines ``x1 = 1  # step 1``: real / estimate 1.10; they were 1.57, and a table 1.22, while
whitespace was free); JSON (0.72) and box-drawing rules, which the vocabularies pack into
few tokens, are counted high.

Because every cost depends only on maximal runs of one character class, on single code
points, or on a space and the character after it, the count of any prefix (and of any
suffix) is at most the count of the whole text, which binary-search truncation relies on,
and joining two texts with a line break adds their counts exactly.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container, Iterator, Sequence

import regex

from memstrata.retrieval.marks import MARKS, MARKS_ASTRAL, MARKS_BMP

__all__ = [
    "CJK_BIGRAMS",
    "CJK_CHAR",
    "COUNTED",
    "COUNTED_RUNS",
    "ENGLISH_STOPWORDS",
    "count_tokens",
    "light_stem",
    "tokenize",
]

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
# Scripts written without spaces between words, besides CJK: Thai, Lao, Tibetan, Myanmar
# (with its Extended-A and -B blocks) and Khmer. ``marks.MARKS`` leaves their marks out.
_UNSPACED = "\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\ua9e0-\ua9ff\uaa60-\uaa7f"
# A maximal run of their letters and marks, from a letter (a mark with no letter before it
# is no term, as in every script), cut into grapheme clusters for the index. Not their
# digits, punctuation or symbols: a number is one term, as in every script, and ๏ or ។
# ends a run like a full stop. The clusters, and which code points are letters, are
# ``regex``'s (its Unicode version); agent/preview.py and text.py cut at the same clusters.
_UNSPACED_RUN = regex.compile(f"(?V1)[[{_UNSPACED}]&&\\p{{L}}][[{_UNSPACED}]&&[\\p{{L}}\\p{{M}}]]*")
_CLUSTER = regex.compile(r"\X")
# What sends a text to the slower full rules: a combining mark or a character ``_DROPPED``
# removes from inside a word, or a character of an unspaced script. One class, so text
# without any of them (nearly all English and Chinese) is scanned once.
_FULL_RULES_BMP = re.compile(f"[{MARKS_BMP}\u00ad\u0640\u200c\u200d{_UNSPACED}]")
_ASTRAL_MARK = re.compile(f"[{MARKS_ASTRAL}]")
# Dropped before splitting, so a word is one term with or without them: joiners inside a
# word (Indic conjuncts), variation selectors (emoji or text style), the Arabic tatweel
# (U+0640, which stretches a word: مرحــبا is مرحبا) and the soft hyphen (U+00AD, a
# hyphenation point that only shows at a line end) shape glyphs, not meaning; and the
# vowel points Arabic (harakat) and Hebrew (niqqud) text mostly leaves out, so pointed and
# unpointed spellings of a word match. (U+05BE, U+05C0, U+05C3 and U+05C6 in the Hebrew
# range are punctuation, not points.)
_HEBREW_POINTS = [c for c in range(0x0591, 0x05C8) if c not in (0x05BE, 0x05C0, 0x05C3, 0x05C6)]
_GLYPH_ONLY = [0x00AD, 0x0640, 0x200C, 0x200D, *range(0xFE00, 0xFE10)]
_DROPPED = dict.fromkeys([*_GLYPH_ONLY, *range(0x064B, 0x0660), 0x0670, *_HEBREW_POINTS], None)

# One CJK character: a word of its own for the index, so a cut before it is a word boundary.
CJK_CHAR = re.compile(f"[{_CJK}]")
# Two or more CJK characters in a row: their adjacent pairs become extra terms.
_CJK_RUN = re.compile(f"[{_CJK}]{{2,}}")

# Whether unspaced text also yields bigrams — adjacent CJK characters, adjacent clusters of
# the other unspaced scripts (see ``tokenize``); decided by measurement on MADial-Bench
# (docs/BENCHMARKS.md).
CJK_BIGRAMS = True

# What an estimated token is, by script (module doc; measured by
# benchmarks/token_estimate.py against cl100k, the vocabulary that spends the most):
# Latin and Cyrillic letters beyond ASCII, two to a token ...
_HALF = (
    "\u00aa\u00b5\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\u2c60-\u2c7f"
    "\ua722-\ua7ff\uab30-\uab6f\u0400-\u0481\u048a-\u052f\u1c80-\u1c8f\ua640-\ua66e\ua680-\ua69d"
)
# ... one code point (letter, mark or sign) one token: Greek, Hebrew, Arabic (also Persian
# and Urdu), Thai, full-width digits and superscript figures ...
_ONE = (
    "\u00b2\u00b3\u00b9\u00bc-\u00be\u0370-\u03ff\u1f00-\u1fff\u0590-\u05ff\ufb1d-\ufb4f"
    "\u0600-\u06ff\u0750-\u077f\u0870-\u08ff\ufb50-\ufdff\ufe70-\ufefc\u0e00-\u0e7f\uff10-\uff19"
)
# ... three tokens for two code points: Devanagari, Bengali, Tamil, Malayalam, Khmer ...
_ONE_AND_HALF = "\u0900-\u09ff\u0b80-\u0bff\u0d00-\u0d7f\u1780-\u17ff"
# ... two tokens a code point: Gurmukhi, Gujarati, Telugu, Kannada, Sinhala, Lao, Tibetan,
# Myanmar, Georgian, full-width Latin letters ...
_TWO = (
    "\u0a00-\u0aff\u0c00-\u0cff\u0d80-\u0dff\u0e80-\u0eff\u0f00-\u0fff\u1000-\u109f\u10a0-\u10ff"
    "\u1c90-\u1cbf\u2d00-\u2d2f\uff21-\uff3a\uff41-\uff5a"
)
# ... and three: Odia, Ethiopic. A letter of any other script costs its UTF-8 length: 2
# below U+0800 (Armenian, Syriac, Thaana), 3 above, the most a byte-level vocabulary
# spends on a character it has no pieces for.
_THREE = "\u0b00-\u0b7f\u1200-\u139f\u2d80-\u2ddf"
_MEASURED = f"{_CJK}{_HALF}{_ONE}{_ONE_AND_HALF}{_TWO}{_THREE}"

# findall() yields exactly one match per estimated token before the surcharges below: greedy
# {1,n} repetition cuts a maximal run of length L into ceil(L / n) matches, and "\S" catches
# everything else (CJK and the scripts charged by code point) one code point at a time.
# Spaces and tabs cost what byte-level BPE spends on them (module doc): a run of two or more
# is one token for all but its last character, which joins the next word; a space or tab
# before a digit is a token of its own, since digits never take one. Written so that a
# lone space between words fails at its first lookahead: most spaces are that, and two
# plain alternatives made counting English 11-21 % slower, this form 0-10 %.
_SPACES = "[ \\t](?=[ \\t0-9])(?:[ \\t]*(?=[ \\t]))?"
_PIECE = re.compile(f"[A-Za-z]{{1,4}}|[0-9]{{1,3}}|[{_HALF}]{{1,2}}|\\S|{_SPACES}")
# Surcharges (module doc). One token more: a BMP pictograph, a variation selector, the
# zero-width joiner, a code point of the two-token scripts, a letter of another script
# below U+0800. Two more: a code point outside the BMP that is not CJK (most emoji), a
# code point of the three-token scripts, a letter of another script above U+0800. Half a
# token more (ceil(L / 2) for a maximal run of L): the one-and-a-half-token scripts.
_ONE_MORE = re.compile(
    f"[\u2190-\u2bff\ufe00-\ufe0f\u200d{_TWO}]|[^\\W\\x00-\\x7f\u0800-\U0010ffff{_HALF}{_ONE}]"
)
_TWO_MORE = re.compile(
    f"[\U00010000-\U0001ffff\U0002ebf0-\U0002ffff\U000323b0-\U0010ffff{_THREE}]"
    f"|[^\\W\\x00-\u07ff\U00010000-\U0010ffff{_MEASURED}]"
)
_HALF_MORE = re.compile(f"[{_ONE_AND_HALF}]{{1,2}}")

# ``count_tokens(text)`` is the sum of ``weight * len(pattern.findall(text))`` over these
# (its ASCII shortcut skips the surcharges only where they match nothing). agent.line_prefix
# counts the prefixes of a long line from checkpoints on it, relying on two properties of
# these patterns (its module doc gives the reasoning; keep them, or make it stop relying on
# them): every match longer than one character lies in a run of one of ``COUNTED_RUNS``,
# and a step of a scan depends on no character past the one after where the scan resumes.
COUNTED: tuple[tuple[re.Pattern[str], int], ...] = (
    (_PIECE, 1),
    (_ONE_MORE, 1),
    (_TWO_MORE, 2),
    (_HALF_MORE, 1),
)
# Character classes (the inside of ``[...]``): ASCII letters, ASCII digits, the half-token
# letters, spaces and tabs, the one-and-a-half-token scripts.
COUNTED_RUNS: tuple[str, ...] = ("A-Za-z", "0-9", _HALF, " \\t", _ONE_AND_HALF)

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
    ambiguous (``乌`` of ``乌龙茶``), and a matching pair is much stronger evidence. So is
    every pair of adjacent grapheme clusters in a run of Thai, Lao, Tibetan, Myanmar or
    Khmer (``ข้า``, ``าว``), by the same rule (``_pairs``).

    Use the same settings for documents and queries, or stopped query words will never
    match (and unstopped document words will skew lengths).
    """
    # casefold, not lower: Fußball must match FUSSBALL, and Greek final ς match σ. Folding
    # can decompose (ΐ becomes ι, U+0308, U+0301), so the result is composed again: Ϊ́ and
    # ΐ fold to one term.
    normal = unicodedata.normalize("NFKC", text).casefold()
    if not normal.isascii():
        normal = unicodedata.normalize("NFKC", normal)
    runs: list[list[str]] = []  # the clusters of each unspaced run, for their pairs
    if not _needs_full_rules(normal):
        terms = _TERM.findall(normal)
    else:
        # casefold() makes Turkish İ "i" + a combining dot: İşte must match işte.
        normal = normal.replace("i\u0307", "i").translate(_DROPPED)
        terms, runs = _words_and_clusters(normal)
    if stopwords is ENGLISH_STOPWORDS and stem:
        terms = _default_terms(terms)
    else:
        if stopwords:
            terms = [term for term in terms if term not in stopwords]
        if stem:
            terms = [light_stem(term) for term in terms]
    if cjk_bigrams:
        for run in _CJK_RUN.findall(normal):
            terms.extend(_pairs(run))
        for clusters in runs:
            terms.extend(_pairs(clusters))
    return terms


def _pairs(units: Sequence[str]) -> Iterator[str]:
    """The bigrams of a run of unspaced text: each unit (a CJK character, a cluster of
    Thai and the like) joined to the next. (``map``: as fast as slicing a string of
    Chinese, a third faster than ``zip``.)"""
    return map(str.__add__, units, units[1:])


def _words_and_clusters(normal: str) -> tuple[list[str], list[list[str]]]:
    """The unigram terms of ``normal`` in text order, and the clusters of each unspaced run.

    Between the runs, words and CJK characters are found as everywhere; a word that touches
    a run ends there (``abcไทย`` is ``abc`` and the clusters of ``ไทย``)."""
    terms: list[str] = []
    runs: list[list[str]] = []
    at = 0
    for run in _UNSPACED_RUN.finditer(normal):
        terms += _TERM_WITH_MARKS.findall(normal, at, run.start())
        clusters: list[str] = _CLUSTER.findall(run.group())
        terms += clusters
        runs.append(clusters)
        at = run.end()
    terms += _TERM_WITH_MARKS.findall(normal, at)
    return terms, runs


def _needs_full_rules(text: str) -> bool:
    """Whether ``text`` has a combining mark, a character dropped inside words, or a
    character of an unspaced script (other than CJK)."""
    if text.isascii():  # O(1) in CPython: a flag of the string
        return False
    if _FULL_RULES_BMP.search(text) is not None:
        return True
    return max(text) > "\uffff" and _ASTRAL_MARK.search(text) is not None


def count_tokens(text: str) -> int:
    """Estimate the LLM tokens in ``text`` using the rule in the module docstring.

    It adds over line breaks: ``count_tokens(a + "\\n" + b) == count_tokens(a) +
    count_tokens(b)`` for all ``a`` and ``b``: no pattern matches a line break, and a
    lookahead fails on one as at the end of the text (``agent.prompt_count`` gives the
    reasoning and counts the prompt's cuts by it). Keep it so, or make that module stop
    relying on it; likewise the two properties of ``COUNTED`` that ``agent.line_prefix``
    counts a long line's prefixes by."""
    pieces = len(_PIECE.findall(text))
    if text.isascii():  # O(1): no surcharge can apply
        return pieces
    return (
        pieces
        + len(_ONE_MORE.findall(text))
        + 2 * len(_TWO_MORE.findall(text))
        + len(_HALF_MORE.findall(text))
    )
