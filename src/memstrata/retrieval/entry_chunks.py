"""Entry chunking of a memory file: one chunk per entry (``MEMSTRATA_MEMORY_CHUNKING=entries``).

The spec's chunking (``retrieval.chunk``, the default) packs paragraphs into chunks of up
to 512 tokens, and a MEMORY.md written by ``record_memory`` is a few sections of one-line
dated entries with no blank line between them: grown to hundreds of entries, each chunk
holds ~25 entries of the same shape ("X lives in Y", "X's birthday is …"). Both retrievers
then rank chunks, not facts: BM25 scores a chunk that names the person in one entry and
the asked-for relation in another like the entry that holds both, and a chunk's vector
blurs 25 facts. Recall@5 of the agent's own facts falls as the file grows; with a chunk
per entry it does not (docs/BENCHMARKS.md, "A long-lived user's MEMORY.md"). Smaller
packed chunks are not enough: a chunk of two or three entries still mixes them.

An entry is what the agent tools and the system prompt's cut of MEMORY.md call one
(``agent.markdown_doc``): a top-level list item with the lines under it, or a paragraph
(fenced code stays whole inside it). Headings are not entries: a heading's lines go with
the entry after it, so the first entry of a section carries its title. An entry longer
than a chunk is cut as ``chunk_text`` cuts a paragraph. Nothing is reordered, and only
blank lines and the template's scaffolding are dropped.

Scaffolding (``retrieval.scaffold``) is left out at both grains: a paragraph still equal
to one of the template's, as with the spec's chunking, and an entry still equal to one of
a template paragraph's entries — the keys of a partly filled-in USER.md ("- Pronouns:"),
which would otherwise be rows of their own.

This departs from the spec's "merge small paragraphs", so it is an opt-in setting.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from memstrata.agent.markdown_doc import Kind, parse
from memstrata.retrieval.chunk import CHUNK_TOKENS, TokenCounter, chunk_text
from memstrata.retrieval.scaffold import blank_scaffold, comparable
from memstrata.retrieval.tokenize import count_tokens

__all__ = ["entries", "entry_chunks"]


def entry_chunks(
    text: str,
    max_tokens: int = CHUNK_TOKENS,
    count: TokenCounter = count_tokens,
    *,
    scaffold: Collection[str] = (),
) -> list[str]:
    """One chunk per entry of ``text`` (module doc), each at most ``max_tokens``; the
    template paragraphs ``scaffold`` (keys from ``scaffold_keys``) and their entries are
    left out."""
    chunks: list[str] = []
    for entry in entries(blank_scaffold(text, scaffold), _entries_of(scaffold)):
        chunks.extend(chunk_text(entry, max_tokens, count))
    return chunks


def entries(text: str, skip: Collection[str] = ()) -> Iterator[str]:
    """The entries of ``text`` in order, each after the headings just above it (one line
    break between); an entry in ``skip`` (compared as ``comparable`` makes it) is left out
    and its headings go with the next one. Headings with no entry after them end the text
    as one piece."""
    doc = parse(text)
    heads: list[str] = []  # the lines of the headings waiting for an entry
    for block in doc.blocks:
        lines = doc.lines[block.start : block.end]
        if block.kind is Kind.HEADING:
            heads.extend(lines)
        elif not (skip and comparable("\n".join(lines)) in skip):
            yield "\n".join([*heads, *lines])
            heads = []
    if heads:
        yield "\n".join(heads)


def _entries_of(scaffold: Collection[str]) -> frozenset[str]:
    """The entries of the template paragraphs (without the headings above them), as
    compared."""
    found: set[str] = set()
    for paragraph in scaffold:
        doc = parse(paragraph)
        for block in doc.blocks:
            if block.kind is not Kind.HEADING:
                found.add(comparable("\n".join(doc.lines[block.start : block.end])))
    return frozenset(found)
