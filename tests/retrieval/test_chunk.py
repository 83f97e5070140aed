from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.retrieval.chunk import chunk_text
from memstrata.retrieval.tokenize import count_tokens


def words(text: str) -> int:
    """A prefix-monotone counter that makes expected chunks easy to read."""
    return len(text.split())


def non_whitespace(text: str) -> str:
    return "".join(text.split())


class TestParagraphs:
    def test_empty_and_whitespace_only(self) -> None:
        assert chunk_text("") == []
        assert chunk_text(" \n\n \t\n") == []

    def test_small_paragraphs_merge_while_they_fit(self) -> None:
        text = "a b\n\nc d\n\n\n\ne f\n\ng"
        assert chunk_text(text, max_tokens=4, count=words) == ["a b\n\nc d", "e f\n\ng"]

    def test_everything_fits_in_one_chunk(self) -> None:
        text = "  First paragraph.\n\nSecond one.\n \n\t\nThird.  \n"
        assert chunk_text(text) == ["First paragraph.\n\nSecond one.\n\nThird."]

    def test_whitespace_only_line_is_a_boundary(self) -> None:
        assert chunk_text("one two\n   \nthree", max_tokens=2, count=words) == [
            "one two",
            "three",
        ]

    def test_single_newline_does_not_end_a_paragraph(self) -> None:
        assert chunk_text("one\ntwo\n\nthree", max_tokens=2, count=words) == ["one\ntwo", "three"]

    def test_windows_line_endings(self) -> None:
        assert chunk_text("one\r\n\r\ntwo", max_tokens=1, count=words) == ["one", "two"]

    def test_default_counter_and_limit(self) -> None:
        # 300 paragraphs of "word" (1 token each): 512 fit in a chunk, so all merge.
        assert chunk_text("\n\n".join(["word"] * 300)) == ["\n\n".join(["word"] * 300)]
        # 600 of them: the first 512 fill one chunk, the other 88 the next.
        assert chunk_text("\n\n".join(["word"] * 600)) == [
            "\n\n".join(["word"] * 512),
            "\n\n".join(["word"] * 88),
        ]


class TestLongParagraphs:
    def test_split_on_latin_sentence_ends(self) -> None:
        text = "One two three. Four five! Six seven? Eight."
        assert chunk_text(text, max_tokens=5, count=words) == [
            "One two three. Four five!",
            "Six seven? Eight.",
        ]

    def test_split_on_chinese_sentence_ends(self) -> None:
        text = "今天天气很好。我们去公园吧！你觉得呢？"  # 7 + 7 + 5 tokens
        assert chunk_text(text, max_tokens=8) == ["今天天气很好。", "我们去公园吧！", "你觉得呢？"]
        assert chunk_text(text, max_tokens=12) == ["今天天气很好。", "我们去公园吧！你觉得呢？"]

    def test_closing_quote_stays_with_its_sentence(self) -> None:
        text = "他说：“好的。”然后走了。"
        assert chunk_text(text, max_tokens=8) == ["他说：“好的。”", "然后走了。"]  # 8 + 5

    def test_decimal_point_is_not_a_sentence_end(self) -> None:
        text = "Pi is 3.14 today. Tau is 6.28 tomorrow."
        assert chunk_text(text, max_tokens=4, count=words) == [
            "Pi is 3.14 today.",
            "Tau is 6.28 tomorrow.",
        ]

    def test_newline_is_a_sentence_boundary_and_kept_inside_chunks(self) -> None:
        text = "line one\nline two\nline three"
        assert chunk_text(text, max_tokens=4, count=words) == ["line one\nline two", "line three"]

    def test_long_paragraph_chunks_do_not_merge_with_neighbours(self) -> None:
        text = "tiny\n\nA b c. D e f.\n\nsmall"
        assert chunk_text(text, max_tokens=3, count=words) == ["tiny", "A b c.", "D e f.", "small"]


class TestHardSplit:
    def test_overlong_sentence_splits_between_words(self) -> None:
        text = "one two three four five"
        assert chunk_text(text, max_tokens=2, count=words) == ["one two", "three four", "five"]

    def test_overlong_word_splits_by_tokens(self) -> None:
        # 26 ASCII letters = 7 tokens of at most 4 letters; "hello" and "world" cost 2 each.
        text = "abcdefghijklmnopqrstuvwxyz hello world"
        assert chunk_text(text, max_tokens=3) == [
            "abcdefghijkl",
            "mnopqrstuvwx",
            "yz hello",
            "world",
        ]

    def test_chinese_without_punctuation_splits_by_characters(self) -> None:
        assert chunk_text("一二三四五六七", max_tokens=3) == ["一二三", "四五六", "七"]

    def test_tail_of_a_split_sentence_joins_the_next_sentence(self) -> None:
        text = "abcdefghijklmnop. x"  # sentence 1 costs 4 + 1; "mnop. x" costs 3
        assert chunk_text(text, max_tokens=3) == ["abcdefghijkl", "mnop. x"]

    @pytest.mark.parametrize(
        "cluster",
        [
            "👨\u200d👩\u200d👧\u200d👦",  # a ZWJ sequence
            "🇨🇳🇯🇵",  # flags: pairs of regional indicators
            "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # a tag flag
            "👍🏽",  # a skin tone
            "e\u0301",  # an accent as a combining mark (NFD)
            "क्षत्रिय",  # Devanagari conjuncts
            "Z\u0334\u0321\u032a",  # a stack of marks
            "1\ufe0f\u20e3",  # a keycap
        ],
    )
    def test_a_word_too_long_is_cut_between_grapheme_clusters(self, cluster: str) -> None:
        """The cut used to fall on any code point: '…👨\u200d👩' | '\u200d👧…'."""
        text = cluster * 300
        for max_tokens in (512, 61):
            chunks = chunk_text(text, max_tokens=max_tokens)
            assert len(chunks) > 1 and "".join(chunks) == text
            assert all(count_tokens(chunk) <= max_tokens for chunk in chunks)
            assert cuts(chunks) <= cluster_starts(text), chunks[0][-4:]

    def test_a_cluster_too_long_for_a_chunk_is_cut_inside_it(self) -> None:
        """A letter under 40 combining accents (as "Zalgo" text stacks them) counts more
        than a chunk holds: with no boundary left to back off to, it is cut inside."""
        text = "ab" + "e" + "\u0301" * 40
        for max_tokens in (3, 8, 16):
            chunks = chunk_text(text, max_tokens=max_tokens)
            assert "".join(chunks) == text and chunks[0] == "ab"
            assert all(count_tokens(chunk) <= max_tokens for chunk in chunks)

    def test_rejects_a_limit_below_one(self) -> None:
        with pytest.raises(ValueError, match="max_tokens must be at least 1"):
            chunk_text("text", max_tokens=0)

    def test_rejects_a_character_that_cannot_fit(self) -> None:
        with pytest.raises(ValueError, match="alone counts more than max_tokens=1"):
            chunk_text("ab", max_tokens=1, count=lambda s: 2 * len(s))


# Grapheme clusters that stay separate when joined (a lone mark or joiner would merge
# its neighbours into one ever longer cluster).
CLUSTERS = [
    "a", "bc", "我", "。", "👍", "👍🏽", "🇨🇳", "👨\u200d👩\u200d👧\u200d👦", "e\u0301", "क्ष", "कि",
    "❤\ufe0f", "1\ufe0f\u20e3",
]  # fmt: skip


def cuts(chunks: list[str]) -> set[int]:
    """Where consecutive chunks meet, for chunks that concatenate to the text."""
    ends, at = set(), 0
    for chunk in chunks[:-1]:
        at += len(chunk)
        ends.add(at)
    return ends


def cluster_starts(text: str) -> set[int]:
    return {match.start() for match in regex.finditer(r"\X", text)}


# Biased towards the characters that matter: sentence ends, blank lines, long runs.
ALPHABET = "aaaabbcd 我我你。！？.!?,\n\n  \t\r'\"”」1234567890👍é"


class TestInvariants:
    # From 3: the most one code point costs under ``count_tokens`` (an emoji), so smaller
    # limits cannot hold every text; the service's chunk size is at least 16.
    @settings(max_examples=300)
    @given(st.text(alphabet=ALPHABET, max_size=400), st.integers(min_value=3, max_value=40))
    def test_chunks_fit_and_keep_every_character(self, text: str, max_tokens: int) -> None:
        chunks = chunk_text(text, max_tokens=max_tokens)
        assert all(count_tokens(chunk) <= max_tokens for chunk in chunks)
        assert all(chunk and chunk == chunk.strip() for chunk in chunks)
        assert "".join(non_whitespace(chunk) for chunk in chunks) == non_whitespace(text)

    @given(st.text(alphabet=ALPHABET, max_size=400), st.integers(min_value=1, max_value=12))
    def test_invariants_hold_for_another_counter(self, text: str, max_tokens: int) -> None:
        chunks = chunk_text(text, max_tokens=max_tokens, count=words)
        assert all(words(chunk) <= max_tokens for chunk in chunks)
        assert "".join(non_whitespace(chunk) for chunk in chunks) == non_whitespace(text)

    # Words of at most 3 tokens (12 ASCII letters) in one long sentence: each fits a
    # chunk, so every cut falls between two words, never inside one.
    @given(
        st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=12), min_size=1),
        st.integers(min_value=3, max_value=12),
    )
    def test_words_that_fit_a_chunk_are_never_cut(
        self, word_list: list[str], max_tokens: int
    ) -> None:
        chunks = chunk_text(" ".join(word_list), max_tokens=max_tokens)
        assert [word for chunk in chunks for word in chunk.split(" ")] == word_list

    # Whole clusters of at most 18 tokens, joined without spaces: every cut of the hard
    # split must fall between two of the text's grapheme clusters.
    @settings(max_examples=150)
    @given(st.lists(st.sampled_from(CLUSTERS), max_size=200), st.integers(18, 60))
    def test_hard_splits_fall_between_grapheme_clusters(
        self, clusters: list[str], max_tokens: int
    ) -> None:
        text = "".join(clusters)
        chunks = chunk_text(text, max_tokens=max_tokens)
        assert "".join(chunks) == text
        assert all(count_tokens(chunk) <= max_tokens for chunk in chunks)
        assert cuts(chunks) <= cluster_starts(text)

    def test_huge_unbroken_text_is_split_in_linear_passes(self) -> None:
        text = "x" * 400_000  # 100,000 tokens with no boundary at all
        chunks = chunk_text(text, max_tokens=512)
        assert len(chunks) == 196  # ceil(100,000 / 512)
        assert chunks[0] == "x" * 2048
        assert chunks[-1] == "x" * (400_000 - 195 * 2048)

    def test_many_short_sentences_are_packed_with_few_counts(self) -> None:
        """Counting the growing chunk once per line took 5.1 s on a 256 KiB file of
        one-character lines; the galloping search gives the same chunks."""
        calls = 0

        def counting(text: str) -> int:
            nonlocal calls
            calls += 1
            return count_tokens(text)

        text = "-\n" * 131_000  # 262,000 bytes: one paragraph of 131,000 one-token lines
        chunks = chunk_text(text, max_tokens=512, count=counting)
        assert len(chunks) == 256 and all(c == "\n".join(["-"] * 512) for c in chunks[:-1])
        assert calls < 20_000, calls  # one count per line before: over 131,000
