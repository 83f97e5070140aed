"""The memory tools' argument checks and limits: section and key names, entry and value
texts, section bodies, and ``memory_search``'s query, ``top_k`` and ``sources`` (also the
MCP tool's). The schemas (:mod:`memstrata.agent.schemas`) state the same limits.

Each check returns the cleaned value or raises :class:`~memstrata.errors.ToolInputError`
with a message the tool answers with (``docs/AGENT_TOOLS.md``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from memstrata.agent import markdown_doc, model_markup, sections
from memstrata.agent.json_numbers import json_integer
from memstrata.errors import InvalidContentError, ToolInputError
from memstrata.retrieval.limits import MAX_TOOL_TOP_K
from memstrata.retrieval.search_input import check_query, check_sources
from memstrata.text import character_at, refused_id_character, shortened, unstorable_text

MAX_ENTRY_CHARS = 2000
WHOLE_FILE = "content (the whole new MEMORY.md)"  # update_long_term_memory's, without section
MAX_NAME_CHARS = 80
MAX_VALUE_CHARS = 500
EMPTY_VALUE = (
    "content must not be empty (nor a dash alone) when key is given: send the value, e.g. "
    "'Europe/Berlin'; to remove the fact, replace the section's body without its line "
    "(update_user without key, replace_section=true)"
)
DEFAULT_TOOL_TOP_K = 5  # memory_search's top_k when the model gives none
_QUOTED_CHARS = 40  # of the line opening an HTML block, as a refusal quotes it


def check_name(value: object, what: str, example: str = "Decisions") -> str:
    """A section name or key a call writes: :func:`name_read`, and none of the characters
    no id may hold, nor more than ``MAX_NAME_CHARS``."""
    name = name_read(value, what, example)
    fix = f"give the name alone in plain text, such as {example!r}"
    # Refused, never stripped: one that shows as nothing or reorders the text makes a
    # second section (or key) that looks like the first.
    if (refused := refused_id_character(name, "the name")) is not None:
        at, named = refused
        raise ToolInputError(f"{what} must not contain {named} ({character_at(at)}); {fix}")
    if len(name) > MAX_NAME_CHARS:
        raise ToolInputError(f"{what} must be one line of at most {MAX_NAME_CHARS} characters")
    return name


def name_read(value: object, what: str, example: str = "Decisions") -> str:
    """A section name as a read looks it up (``memory_read``'s ``section``): not blank, one
    line, storable; without its ``#`` run. What :func:`check_name` refuses besides stays
    readable: a person's edit may have written such a heading, and a read makes none."""
    if not isinstance(value, str) or not value.strip().lstrip("#").strip():
        raise ToolInputError(f"{what} must be a non-empty string such as {example!r}")
    name = value.strip().lstrip("#").strip()
    if (found := line_break_in(name)) is not None:
        raise ToolInputError(
            f"{what} must be one line, but it has a line break ({found!r}); give just the "
            f"name, such as {example!r}, and put anything more in content"
        )
    # A name the file cannot store failed only at the save, its refusal blaming content
    # and keeping a copy aside.
    if (problem := unstorable_text(name, what)) is not None:
        raise ToolInputError(f"{problem}; give the name alone in plain text, such as {example!r}")
    return name


def check_key(value: object) -> str:
    """``update_user``'s key: a name (:func:`check_name`) without ``:``, and without the
    bullet and emphasis a model copies from the file (:func:`model_markup.plain_key`)."""
    key = model_markup.plain_key(check_name(value, "key", "Time zone"))
    if ":" in key:
        name = key.split(":", 1)[0].strip() or "Name"
        raise ToolInputError(
            f"key must not contain ':'; give the name alone (key={name!r}) and the value in content"
        )
    return key


def check_value(value: object) -> str:
    """``update_user``'s content when a key is given: one line of a value, without the
    bullet a model copies from the file (:func:`model_markup.plain_value`)."""
    text = check_text(value, "content", MAX_VALUE_CHARS, empty_ok=True).strip()
    if _says_nothing(model_markup.plain_value(text)):
        # A key with no value stored "- Empty: ", a fact that says nothing; a model sending
        # "" most likely meant to remove the fact, which this call cannot do. A "-" is a
        # model's "none" (a table's empty cell) and stored "- Key: -": the same refusal.
        raise ToolInputError(EMPTY_VALUE)
    if line_break_in(text) is not None:
        raise ToolInputError(
            "content must be one line when a key is given; join the lines (e.g. with ', '), "
            "or leave out key to replace the section's whole body"
        )
    return model_markup.plain_value(text)


def _says_nothing(value: str) -> bool:
    """Whether a value is blank, or dashes and blanks only (``-``, ``—``, ``- -``): Unicode's
    dash punctuation (category Pd) and the minus sign, any of which a model writes for
    "none"."""
    return all(
        char.isspace() or char == "\u2212" or unicodedata.category(char) == "Pd" for char in value
    )


def check_body(value: object, section: str, file: str) -> str:
    """A section body: its own heading, if repeated first, dropped; another ``#`` or ``##``
    heading refused (it would start a new section, out of reach of this section's edits),
    and so is a fence or HTML block left open (:func:`check_open_blocks`)."""
    text = check_text(value, "content", empty_ok=True)
    body = sections.without_own_heading(text, section)
    heading = sections.section_heading_in(body)
    if heading is not None:
        raise ToolInputError(
            f"content is the body of ## {section} and must not hold the heading {heading!r}: "
            f"leave it out, use '###' for a subheading, and make one call per section of {file}"
        )
    # Numbered in the content as sent: the dropped heading line opens and closes no fence.
    check_open_blocks(numbered_lines(text), file)
    return body


def check_entry(value: object) -> str:
    """``record_memory``'s content, checked as its entries write it: one per item of a
    list, each without the marker and date the tool writes itself
    (:func:`model_markup.new_entries`), its lines as
    :func:`~memstrata.agent.sections.entry_lines` writes them. Later lines are indented
    under the item, so a fence among them ends with the entry at the latest and leaves none
    open in the file. A fence on the first line, though, opens none — it follows the
    bullet's date —, so the line meant to close it opens a code block and the code reads
    as text: refused, and the answer says why."""
    text = check_text(value, "content", MAX_ENTRY_CHARS)
    found = model_markup.new_entries(text)
    if not found:
        raise ToolInputError(
            "content has no text besides a list marker or date, which the entry gets anyway; "
            "send the text to remember"
        )
    for _, entry in found:
        _check_first_fence(entry)
    return text


def _check_first_fence(text: str) -> None:
    (_, first), *rest = sections.entry_lines(text)
    found = _unclosed(rest)  # read alone, as if the first line had opened the fence
    opened = markdown_doc.fence_after(None, first)
    if found is not None and opened is not None:
        number, fence = found
        raise ToolInputError(
            f"content starts with a {opened} fence, but an entry's first line is written after "
            f"its date ('- YYYY-MM-DD: {first}'), where it opens no code block, so the {fence} "
            f"on line {number} would open one instead of closing it, and the code would read "
            "as text. Start content with a line saying what the code is, then the fenced block"
        )


def check_whole_file(value: object, whole_file: bool) -> str:
    """``update_long_term_memory``'s content without a section; one that will be written
    (``whole_file``) leaves no fence or HTML block open (:func:`check_open_blocks`)."""
    text = check_text(value, WHOLE_FILE)
    if whole_file:
        check_open_blocks(numbered_lines(text), "MEMORY.md")
    return text


def check_open_blocks(lines: Sequence[tuple[int, str]], file: str) -> None:
    """Refuse content whose ``lines`` — (line number in the content, line as the file will
    hold it) — open a fence they never close. In the file it would run to the end, making
    every later line code: the sections after it vanish from the tools' reading (the next
    call naming one adds it again, inside the code) and from the prompt's cut. Refused, not
    closed for the agent: only the agent knows where its code ends, and a tool never
    changes what the agent wrote (a wrong guess would store text it never sent).

    So is an HTML block that only its end ends (``<!--`` to ``-->``, ``<pre>`` to
    ``</pre>``…: ``markdown_doc``) left open: it runs to the end of the file the same way,
    every later line inside it (a comment's hidden to a reader of the rendered file)."""
    doc = markdown_doc.parse("\n".join(line for _, line in lines))  # one reading, both kinds
    fence, end = doc.open_fence, doc.open_html
    if fence is not None:
        number = lines[doc.fence_line][0]
        raise ToolInputError(
            f"content opens a {fence} fence on line {number} that it never closes, so "
            f"everything after it in {file}, later sections too, would read as code; close "
            f"it with a line of {fence} after the code, or remove it"
        )
    if end is not None:
        number, line = lines[doc.html_line]
        raise ToolInputError(
            f"content opens an HTML block on line {number} ({opening_line(line)}) that it never "
            f"closes, so everything after it in {file}, later sections too, would read as "
            f"part of it; add the closing {end} after it, or remove it"
        )


def opening_line(line: str) -> str:
    """The line that opens an HTML block, as an answer quotes it: stripped, its start."""
    return repr(shortened(line.strip(), _QUOTED_CHARS))


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """``text``'s lines as the file will hold them (split at LF), numbered from 1."""
    return list(enumerate(text.split("\n"), 1))


def _unclosed(lines: Sequence[tuple[int, str]]) -> tuple[int, str] | None:
    """(line number, fence) of the fence ``lines`` leave open (:func:`check_open_blocks`)."""
    found = markdown_doc.unclosed_fence([line for _, line in lines])
    return None if found is None else (lines[found[0]][0], found[1])


def line_break_in(text: str) -> str | None:
    """The first line break in ``text``, or None. Any that ``str.splitlines`` knows counts:
    a lone CR, U+2028 or U+0085 in a heading is a line break to CommonMark or an editor,
    and the next save there would split the heading in two."""
    lines = text.splitlines(keepends=True)
    if len(lines) < 2:
        return None
    first = lines[0]
    return first[len(first.splitlines()[0]) :]


def check_text(
    value: object, what: str, limit: int | None = None, *, empty_ok: bool = False
) -> str:
    if not isinstance(value, str):
        raise ToolInputError(f"{what} must be a string")
    if not empty_ok and not value.strip():
        raise ToolInputError(f"{what} must not be empty")
    if (problem := unstorable_text(value, what)) is not None:
        raise ToolInputError(problem)
    if limit is not None and len(value) > limit:
        raise ToolInputError(f"{what} is {len(value)} characters; the limit is {limit}")
    return value


def search_arguments(
    query: object, top_k: object = DEFAULT_TOOL_TOP_K, sources: object = None
) -> tuple[str, int, list[str] | None]:
    """``memory_search``'s argument limits (also the MCP tool's): query, top_k, sources.
    The query by the search's own rule, HTTP's and the library's (its length, a NUL)."""
    try:
        text = check_query(query)
    except InvalidContentError as exc:
        raise ToolInputError(str(exc)) from exc
    count = json_integer("top_k", top_k)  # 5.0 too, as a call's JSON arguments take it
    if not 1 <= count <= MAX_TOOL_TOP_K:
        raise ToolInputError(f"top_k must be an integer from 1 to {MAX_TOOL_TOP_K}")
    return text, count, _sources(sources)


def _sources(sources: object) -> list[str] | None:
    """``sources`` checked by the search's own rule and words
    (:func:`~memstrata.retrieval.search_input.check_sources`); a value that is no list is
    refused as one holding that value (the tool's schema refuses it first)."""
    if sources is None:
        return None
    try:
        wanted = [sources] if isinstance(sources, str) else list(sources)  # type: ignore[call-overload]
    except TypeError:
        wanted = [sources]
    try:
        return check_sources(wanted)
    except InvalidContentError as exc:
        raise ToolInputError(str(exc)) from exc
