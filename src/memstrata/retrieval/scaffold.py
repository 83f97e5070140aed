"""Template scaffolding is not memory: drop a file's paragraphs that are still the template's.

A user is provisioned with USER.md / MEMORY.md templates full of headings and
instructions ("Facts the user has shared about themselves…"). Indexed, that boilerplate is
resident content, exempt from decay, and under the spec's decay it outranks a conversation
turn that answers the question word for word. So before a memory file is indexed, every
paragraph that is exactly one of its template's paragraphs is removed. The comparison is
purely textual — paragraph by paragraph (the chunking unit), lines compared without their
trailing whitespace and the file without a leading byte-order mark — with no
interpretation of the content: anything the user or the
agent wrote, including a template paragraph they filled in ("- Name: Alice") and a block
between two ``---`` lines at the top of the file, differs from the template and is
indexed. Only the template's own frontmatter is known as scaffolding (files are
provisioned without it, so a user's file holds it only when pasted back).
"""

from __future__ import annotations

from collections.abc import Collection

from memstrata.memory.templates import strip_frontmatter
from memstrata.retrieval.chunk import paragraphs

__all__ = [
    "blank_scaffold",
    "comparable",
    "drop_scaffold",
    "drop_template_paragraphs",
    "scaffold_keys",
]


def comparable(paragraph: str) -> str:
    """``paragraph`` as it is compared with the template's (module doc)."""
    # A leading byte-order mark is an encoding artefact (a sandbox editor saved the file
    # with one), not text: the template's first paragraph behind it is still scaffolding.
    body = paragraph.removeprefix("\ufeff").lstrip().replace("\r\n", "\n")
    return "\n".join(line.rstrip() for line in body.split("\n"))


def scaffold_keys(template: str) -> frozenset[str]:
    """The paragraphs of ``template`` as they are compared (lines without trailing
    whitespace): with its frontmatter and without it, as files are provisioned."""
    both = (*paragraphs(template), *paragraphs(strip_frontmatter(template)))
    return frozenset(comparable(p) for p in both)


def drop_scaffold(content: str, scaffold: Collection[str]) -> str:
    """``content`` without the paragraphs in ``scaffold`` (keys from :func:`scaffold_keys`).
    Its own frontmatter stays: it is something the user or the agent wrote."""
    kept = [p for p in paragraphs(content) if (key := comparable(p)) and key not in scaffold]
    return "\n\n".join(kept)


def blank_scaffold(text: str, scaffold: Collection[str]) -> str:
    """``text`` with each paragraph still equal to one in ``scaffold`` blanked out, line
    for line: the rest keeps its lines and indentation (what an entry is, where a line
    is), as entry chunking and the agent tools' rewrite guard read them."""
    if not scaffold:
        return text
    lines = text.split("\n")
    start = None
    for index, line in enumerate([*lines, ""]):
        if line.strip():
            start = index if start is None else start
            continue
        if start is not None and comparable("\n".join(lines[start:index])) in scaffold:
            lines[start:index] = [""] * (index - start)
        start = None
    return "\n".join(lines)


def drop_template_paragraphs(content: str, template: str) -> str:
    """``content`` without the paragraphs equal to ``template``'s."""
    return drop_scaffold(content, scaffold_keys(template))
