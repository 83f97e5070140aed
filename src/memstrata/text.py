"""Text rules every entry point shares: a check (tool arguments, turns, user ids) and
where a cut may fall (chunks, the prompt's truncation, previews)."""

from __future__ import annotations

import regex

# A cut looks back at most this many characters for a cluster's start; a longer cluster
# (a stack of combining marks, only ever made on purpose) is cut where asked.
MAX_CLUSTER_CHARS = 64

_CLUSTER = regex.compile(r"\X")


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
    where = f"{text[at]!r} at character {at}"
    return f"{what} is not valid Unicode: it contains a lone surrogate ({where})"


def unstorable_text(text: str, what: str) -> str | None:
    """Why ``text`` (called ``what``) cannot be stored as text, or None: a NUL, which
    PostgreSQL's text columns refuse, or a lone surrogate, which UTF-8 cannot carry. The
    one rule and wording for memory files, conversation rounds and tool arguments."""
    if (at := text.find("\x00")) != -1:
        return f"{what} must not contain NUL characters ('\\x00' at character {at})"
    return lone_surrogate_problem(text, what)


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
