"""Free-form lines for the Markdown property tests, drawn beside their fixed lists.

A list of lines (``st.sampled_from``) only recombines the shapes someone thought of, and CI
runs Hypothesis derandomized, so it never sees a new one. These lines are built from the
characters Markdown's block rules look at: the markers ``- * + # > ` ~ < = _ |``, blanks
(spaces, tabs, and the no-break and ideographic spaces that only ``str.strip`` takes for
blanks), ordered markers (digits, then ``.`` or ``)``), a CR, the byte-order mark, a CJK
character and a letter: an indent and up to two whole markers (``1.``, a fence,
``<!--``…), then any of these characters.

A test whose oracle is right only for some shapes narrows them with the keywords of
:func:`free_lines`, and says why.
"""

from __future__ import annotations

import re
from functools import cache

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

BOM = "\ufeff"
CR = "\r"
_BLANKS = " \t"
_MARKS = "-*+#>`~<=_|"
# Whitespace to ``str.strip`` that is no blank to CommonMark (only spaces and tabs are):
# a no-break space and the ideographic space of CJK text.
OTHER_BLANKS = "\u00a0\u3000"
_ALPHABET = _MARKS + _BLANKS + "0123456789.)" + CR + BOM + "中a" + OTHER_BLANKS
# What a line starts with: an indent of up to five columns (a tab is four), then up to two
# whole markers or blanks (``- 1. a``, ``> ```py``, ``  <!--``), so that a fence, an
# ordered item or an HTML opener comes up often; each of them one draw.
_INDENTS = ["", "", " ", "  ", "   ", "    ", "     ", "\t", " \t", "  \t"]
_OPENERS = [
    "", "", "- ", "* ", "+ ", "-", "1. ", "2) ", "10. ", "01.", "1.", "> ", ">", "#", "## ",
    "#######", "```", "~~~", "````", "<!--", "-->", "<div>", "</div>", "<pre>", "<a>", "<?",
    "<!X", "---", "***", "___", "* *", "===", "|", "\t", "  ", *OTHER_BLANKS, BOM,
]  # fmt: skip
_LEADS = [indent + a + b for indent in _INDENTS for a in _OPENERS for b in _OPENERS]
# The lines ``commonmark_lines`` leaves out: one whose text, after any markers of items and
# quotes, is blank to ``str.strip`` but holds another blank than a space or a tab; and one
# that ends in a tag followed by such a blank. Either after a byte-order mark too: the first
# line loses it (``commonmark_text``), and ``\ufeff\u00a0`` is then a no-break space alone.
_NOT_COMMONMARKS = re.compile(
    rf"{BOM}?[ \t>*+\-0-9.)]*(?=[ \t]*[{OTHER_BLANKS}])[ \t{OTHER_BLANKS}]*"
    rf"|.*>(?=[ \t]*[{OTHER_BLANKS}])[ \t{OTHER_BLANKS}]*"
)


@cache  # a strategy per keywords, its leads filtered once
def free_lines(
    *, cr: bool = True, without: str = "", max_size: int = 6, lead: bool = True
) -> SearchStrategy[str]:
    """Lines of a lead (an indent and markers, above; none without ``lead``) and up to
    ``max_size`` characters of the alphabet above, no line break among them but, with
    ``cr``, a CR anywhere. Two draws a line: these lines are drawn by the thousand in every
    run, and nested strategies made the tests' data generation cost more than their checks.

    ``cr=False``: without a CR, for an oracle that reads one as a line break (markdown-it
    does; to the tools a lone CR is text inside its line, and one before a LF is part of
    the line break: use :func:`cr_at_end` for that). ``without``: characters left out."""
    gone = set(without + ("" if cr else CR))
    alphabet = "".join(char for char in _ALPHABET if char not in gone)
    leads = [lead for lead in _LEADS if not set(lead) & gone]
    tail = st.text(alphabet=alphabet, max_size=max_size)
    return st.tuples(st.sampled_from(leads), tail).map("".join) if lead else tail


def cr_at_end(lines: SearchStrategy[str]) -> SearchStrategy[str]:
    """``lines``, some with a CR at the end: a CR LF line break once joined with LF, which
    CommonMark and the tools both read as the line's end."""
    return st.tuples(lines, st.booleans()).map(lambda drawn: drawn[0] + CR * drawn[1])


def commonmark_lines(without: str = "") -> SearchStrategy[str]:
    """Free-form lines for an oracle that is markdown-it-py's reading: a CR only at a line's
    end (:func:`free_lines`), and no line that is blank only to the tools. A text must not
    start with a byte-order mark either: :func:`commonmark_text`.

    The tools read a line as blank by ``str.strip`` (``markdown_doc``'s rule), CommonMark
    by spaces and tabs only: a line of a no-break space, or an item or a quote of one
    (``- \u00a0``, ``> \u00a0``), is blank to the tools and text to CommonMark, so such a
    line ends an item to one and goes on with its paragraph to the other. Nor a tag followed
    by such a blank (``<a>\u00a0``): a lone tag followed by spaces and tabs only starts an
    HTML block (CommonMark 0.31, kind 7), as the tools read it, but markdown-it reads any
    whitespace of a JavaScript regular expression there."""
    lines = free_lines(cr=False, without=without)
    return cr_at_end(lines.filter(lambda line: not _NOT_COMMONMARKS.fullmatch(line)))


def commonmark_text(lines: list[str]) -> str:
    """``lines`` as a file for markdown-it-py to read as the tools do: one line break after
    each, and no byte-order mark at its start, which markdown-it reads as text where the
    tools (as cmark) skip one (a second would be text to both)."""
    return ("\n".join(lines) + "\n").lstrip(BOM)


def with_free(
    listed: SearchStrategy[str], free: SearchStrategy[str] | None = None
) -> SearchStrategy[str]:
    """``listed`` or a free-form line (``free``, by default :func:`free_lines`)."""
    return st.one_of(listed, free_lines() if free is None else free)
