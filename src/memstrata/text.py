"""Text rules every entry point shares: a check (tool arguments, turns, user ids) and
where a cut may fall (chunks, the prompt's truncation, previews)."""

from __future__ import annotations

import unicodedata

import regex

# A cut looks back at most this many characters for a cluster's start; a longer cluster
# (a stack of combining marks, only ever made on purpose) is cut where asked.
MAX_CLUSTER_CHARS = 64

_CLUSTER = regex.compile(r"\X")


def character_at(index: int) -> str:
    """Where a refusal says the character at 0-based ``index`` is, as people count:
    ``character 1`` is the first. The one wording of every message (HTTP, MCP, the
    library, the CLI); a structured offset (``errors[].loc``) stays 0-based."""
    return f"character {index + 1}"


def lone_surrogate_at(text: str) -> int | None:
    """Where ``text`` has a lone surrogate (which JSON's ``"\\ud800"`` can carry and UTF-8,
    hence PostgreSQL, cannot store), or None when it has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def lone_surrogate_problem(text: str, what: str) -> str | None:
    """Why ``text`` (called ``what``) is not valid Unicode, or None: where its first lone
    surrogate is, as every caller that refuses one words it."""
    if (at := lone_surrogate_at(text)) is None:
        return None
    where = f"{text[at]!r} at {character_at(at)}"
    return f"{what} is not valid Unicode: it contains a lone surrogate ({where})"


def unstorable_text(text: str, what: str) -> str | None:
    """Why ``text`` (called ``what``) cannot be stored as text, or None: a NUL, which
    PostgreSQL's text columns refuse, or a lone surrogate, which UTF-8 cannot carry. The
    one rule and wording for memory files, conversation rounds and tool arguments."""
    if (at := text.find("\x00")) != -1:
        return f"{what} must not contain NUL characters ('\\x00' at {character_at(at)})"
    return lone_surrogate_problem(text, what)


# What no id (a user id, a session id) may hold, whatever else its own rule allows: C0, DEL
# and C1 controls and the line and paragraph separators (a log line, a terminal or a
# directory listing shows the id broken), format characters (Unicode category Cf) and the
# other characters Unicode calls default-ignorable: a zero-width one (U+200B, U+2060,
# U+FEFF, the soft hyphen), a Hangul filler, a variation selector after a letter or the
# grapheme joiner U+034F makes "bob\u200b" show as "bob", another user's id; a bidi control
# (U+202E) shows the id, and the text after it, reordered. Allowed only where they shape
# what the text shows (_SHAPING). A pattern of the ``regex`` module, for the rules that
# refuse more characters to compose it with theirs.
_INVISIBLE = r"[\p{Cf}\p{Default_Ignorable_Code_Point}]"
# Scripts whose letters join or form conjuncts, where a zero-width non-joiner between two
# letters changes what is drawn (Persian "mi-khaham", U+06CC U+200C U+062E: two words'
# shapes); between Latin letters, or after a Han ideograph's variation selector, the id
# looks like the one without.
_JOINING = (
    r"\p{Arabic}\p{Syriac}\p{Nko}\p{Mongolian}\p{Devanagari}\p{Bengali}\p{Gurmukhi}"
    r"\p{Gujarati}\p{Oriya}\p{Tamil}\p{Telugu}\p{Kannada}\p{Malayalam}\p{Sinhala}"
)
_SHAPING = (
    # a joiner inside an emoji sequence (woman, joiner, laptop: the technologist)
    r"(?<=\p{Extended_Pictographic}[\p{Emoji_Modifier}\ufe0f]?)\u200d(?=\p{Extended_Pictographic})"
    rf"|(?<=[{_JOINING}]\p{{M}}*)\u200c(?=\p{{L}})"
    # text or emoji presentation of an emoji; a keycap's
    r"|(?<=\p{Extended_Pictographic})[\ufe0e\ufe0f]|(?<=[#*0-9])\ufe0f(?=\u20e3)"
    # a subdivision flag: black flag, tag letters, cancel tag
    r"|(?<=\U0001f3f4[\U000e0020-\U000e007e]*)"
    r"(?:[\U000e0020-\U000e007e](?=[\U000e0020-\U000e007e]*\U000e007f)|\U000e007f)"
    # Mongolian letters take free variation selectors for their positional forms
    r"|(?<=\p{Mongolian})[\u180b-\u180d\u180f]"
)
ID_REFUSED = rf"[\x00-\x1f\x7f-\x9f\u2028\u2029]|(?!{_SHAPING}){_INVISIBLE}"
_ID_REFUSED = regex.compile(ID_REFUSED)
_INVISIBLE_CHAR = regex.compile(_INVISIBLE)
# Unicode's Bidi_Control property: ALM, LRM, RLM, LRE…RLO, LRI…PDI.
_BIDI_CONTROL = regex.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def refused_id_character(text: str, thing: str = "the id") -> tuple[int, str] | None:
    """Where ``text`` holds the first character no id may hold (``ID_REFUSED``), and that
    character named with why it is refused (:func:`refused_in_id`, ``thing`` what ``text``
    is: a memory file's section names and keys keep the ids' rule); None when it holds none."""
    found = _ID_REFUSED.search(text)
    return None if found is None else (found.start(), refused_in_id(found.group(), thing))


def invisible_in_id(char: str) -> bool:
    """Whether ``char``, refused in an id (``ID_REFUSED``), is one that shows as nothing or
    reorders the text, rather than a control character or line separator."""
    return _INVISIBLE_CHAR.match(char) is not None


def refused_in_id(char: str, thing: str = "the id") -> str:
    """A character ``ID_REFUSED`` matches, named in ASCII (safe in a header or a log line),
    and why ``thing`` must not hold it: ``U+202E RIGHT-TO-LEFT OVERRIDE (a bidirectional
    control, which shows the id and the text after it reordered)``."""
    if _BIDI_CONTROL.match(char):
        why = f"a bidirectional control, which shows {thing} and the text after it reordered"
    elif unicodedata.category(char) == "Cf":
        why = f"an invisible format character, which makes {thing} look like another one"
    elif _INVISIBLE_CHAR.match(char):
        why = f"an invisible character, which makes {thing} look like another one"
    else:
        why = "a control character or line separator"
    return f"{character_label(char)} ({why})"


def edge_whitespace(text: str) -> tuple[str, str] | None:
    """("starts" or "ends", the character named) when ``text`` starts or ends with
    whitespace (as ``str.strip`` reads it: a no-break or ideographic space too), else None.
    The ids' rule: ``" bob"`` is compared byte for byte, so another id than ``bob``, yet
    shows as it; refused, never stripped."""
    if not text or text == text.strip():
        return None
    where, char = ("starts", text[0]) if text[0].isspace() else ("ends", text[-1])
    return where, character_label(char)


def character_label(char: str) -> str:
    """``U+000A`` or ``U+3000 IDEOGRAPHIC SPACE``: ASCII, safe in a header or a log line (a
    lone surrogate has no name)."""
    name = "" if "\ud800" <= char <= "\udfff" else unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def grapheme_cut(text: str, index: int, floor: int = 0) -> int:
    """The last grapheme-cluster boundary at or before ``index`` and after ``floor``, so
    that a cut there keeps whole what a reader sees as one character: an emoji with its
    skin tone or ZWJ sequence, a flag's two regional indicators, a letter with its
    combining accent, a Devanagari conjunct, CR LF. ``index`` itself when it is a boundary,
    when no boundary lies after ``floor`` (a cut must make progress), or inside a cluster
    over ``MAX_CLUSTER_CHARS`` long."""
    if index <= floor or index >= len(text):
        return index
    start = max(floor, index - MAX_CLUSTER_CHARS)
    boundary = start
    # Clusters from ``start``, perhaps inside one: that misreading ends at the next base
    # character, long before ``index`` unless the cluster is over-long.
    for match in _CLUSTER.finditer(text, start, min(len(text), index + MAX_CLUSTER_CHARS)):
        if match.end() > index:
            break
        boundary = match.end()
    return index if boundary == start else boundary


def shortened(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a grapheme-cluster boundary
    (:func:`grapheme_cut`), with "…" when anything was cut: how an answer or a log line
    quotes a text it need not show whole."""
    cut = grapheme_cut(text, limit)
    return text if cut >= len(text) else text[:cut] + "…"
