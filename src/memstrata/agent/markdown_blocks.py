"""The rules that read block quotes and HTML blocks, for :mod:`memstrata.agent.markdown_doc`
(its module doc states how they are read): which line starts one, which line ends an HTML
block, and what a block quote's line holds inside its ``>``. CommonMark 0.31, sections 5.1
and 4.6. A line here is read as ``markdown_lines`` reads it: within the items that take
it, its leading blanks spaces.
"""

from __future__ import annotations

import re

from memstrata.agent.markdown_lines import TAB

_QUOTE = re.compile(r" {0,3}>")

# The seven kinds of HTML block, by their start conditions (CommonMark numbers them 1 to 7;
# the number is the kind). 1: raw text elements, to their closing tag.
_RAW = r"(?:pre|script|style|textarea)"
_KIND_1 = re.compile(rf" {{0,3}}<{_RAW}(?:[ \t>]|$)", re.IGNORECASE)
# 6: the block-level elements, to a blank line.
_BLOCK_NAMES = (
    "address|article|aside|base|basefont|blockquote|body|caption|center|col|colgroup|dd|"
    "details|dialog|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|frame|frameset|"
    "h1|h2|h3|h4|h5|h6|head|header|hr|html|iframe|legend|li|link|main|menu|menuitem|nav|"
    "noframes|ol|optgroup|option|p|param|search|section|summary|table|tbody|td|tfoot|th|"
    "thead|title|tr|track|ul"
)
_KIND_6 = re.compile(rf" {{0,3}}</?(?:{_BLOCK_NAMES})(?:[ \t]|/?>|$)", re.IGNORECASE)
# 7: one complete open or closing tag alone on its line. The spec's prose leaves out the
# raw text elements, but commonmark.js and markdown-it read "</pre>" or "<pre/>" alone as
# this kind (kind 1 takes "<pre>" first), and so does the reader.
_NAME = r"[A-Za-z][A-Za-z0-9-]*"
_VALUE = r"""(?:[^"'=<>`\x00-\x20]+|'[^']*'|"[^"]*")"""
_ATTRIBUTE = rf"[ \t]+[A-Za-z_:][A-Za-z0-9_.:-]*(?:[ \t]*=[ \t]*{_VALUE})?"
_KIND_7 = re.compile(
    rf" {{0,3}}(?:<{_NAME}(?:{_ATTRIBUTE})*[ \t]*/?>"
    rf"|</{_NAME}[ \t]*>)[ \t]*",
    re.IGNORECASE,
)
# 2 to 5: a comment, a processing instruction, a declaration, CDATA, each to its end.
_OPENERS = {2: "<!--", 3: r"<\?", 4: "<![A-Za-z]", 5: r"<!\[CDATA\["}
_OTHER_KINDS = tuple((kind, re.compile(" {0,3}" + opener)) for kind, opener in _OPENERS.items())
_END = {
    1: re.compile(rf"</{_RAW}>", re.IGNORECASE),
    2: re.compile("-->"),
    3: re.compile(r"\?>"),
    4: re.compile(">"),
    5: re.compile(r"\]\]>"),
}
# A line that ends each of kinds 2 to 5; kind 1's is the closing tag of the element that
# opened it (any raw text element's would end it, but "</pre>" after "<script>" reads wrong).
_CLOSERS = {2: "-->", 3: "?>", 4: ">", 5: "]]>"}
_RAW_TAG = re.compile(rf"<({_RAW})", re.IGNORECASE)
# Where a block of kinds 1 to 5 may start, anywhere in a text: their openers, without
# their place in the line.
_STARTS = {1: _RAW_TAG, **{kind: re.compile(opener) for kind, opener in _OPENERS.items()}}
# Any of them: one scan rules out most texts (a tenth of the time the kinds one by one take).
_ANY_START = re.compile("|".join(start.pattern for start in _STARTS.values()), re.IGNORECASE)
# The last kind that may interrupt a paragraph: a lone tag (7) may not, as in
# "a <span>" wrapped before its tag.
_INTERRUPTS = 6


def html_start(line: str, under: bool) -> int:
    """The kind of HTML block ``line`` starts (1 to 7), or 0 for none; ``under``: it comes
    right under a line of a paragraph it would otherwise go on with."""
    if "<" not in line[:4]:  # the common case, at the cost of one look
        return 0
    if _KIND_1.match(line):
        return 1
    for kind, start in _OTHER_KINDS:
        if start.match(line):
            return kind
    if _KIND_6.match(line):
        return 6
    return 7 if not under and _KIND_7.fullmatch(line) else 0


def html_ends(kind: int, line: str) -> bool:
    """Whether ``line`` (not blank) is the last line of an HTML block of ``kind`` it is in:
    for kinds 1 to 5, the line holding the end; 6 and 7 end before a blank line only."""
    end = _END.get(kind)
    return end is not None and end.search(line) is not None


def html_closer(kind: int, opening: str = "") -> str | None:
    """A line that ends an HTML block of ``kind`` opened by the line ``opening``: for kind
    1 the closing tag of its element, as spelled there (``</script>`` for ``<script>``);
    None for kinds 6 and 7 (a blank line ends them) and for no block (0)."""
    if kind != 1:
        return _CLOSERS.get(kind)
    tag = _RAW_TAG.search(opening)
    return f"</{'pre' if tag is None else tag.group(1)}>"


def may_run_on(text: str) -> bool:
    """Whether ``text`` may end inside an HTML block of kind 1 to 5, which only its end
    ends: only if a start of one (``<!--``, ``<pre``…, anywhere in a line) comes after the
    last end of its kind (``-->``, ``</pre>``…). A block that starts before such an end is
    closed by it at the latest: every line of the block is searched for its end. So a text
    whose comments are all closed (most files) has none, and a caller can skip its parse."""
    if _ANY_START.search(text) is None:
        return False
    for kind, start in _STARTS.items():
        last_end = max((end.start() for end in _END[kind].finditer(text)), default=0)
        if start.search(text, last_end) is not None:
            return True
    return False


def quote_start(line: str) -> bool:
    """Whether ``line`` starts with a block quote's ``>`` (after at most three spaces)."""
    return _QUOTE.match(line) is not None


def quote_content(line: str, column: int) -> str | None:
    """What a block quote holds of ``line``, which starts at the file's column ``column``:
    the text after its ``>`` and the blank after that, the tabs written as the spaces they
    stand for (a tab the blank was part of leaves the rest of its columns), so the quote's
    content reads in columns from where it starts. None unless ``line`` starts a quote."""
    match = _QUOTE.match(line)
    if match is None:
        return None
    after = line[match.end() :]
    if "\t" in after:
        # The tab stops are the file's: count from the column after the ">".
        shift = (column + match.end()) % TAB
        after = (" " * shift + after).expandtabs(TAB)[shift:]
    return after[1:] if after[:1] == " " else after
