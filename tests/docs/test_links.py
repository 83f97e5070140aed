"""Every relative link in the README, the changelog and docs/ reaches a file, and its
``#anchor`` a heading of that file, as GitHub renders them; so do the README's
`` `docs/X.md#anchor` `` pointers. A renamed heading otherwise breaks links silently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_docs_consistency import DOCS, ROOT

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_POINTER = re.compile(r"`((?:docs/)?[A-Z_]+\.md#[^`\s]+)`")
_EXPLICIT_ID = re.compile(r'<a (?:id|name)="([^"]+)"')


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, code marks and punctuation dropped,
    lower case, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set(_EXPLICIT_ID.findall(text))
    for line in _prose(text):
        m = _HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, -1) + 1
        seen[base] = n
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slugs_follow_githubs_rules() -> None:
    assert slug("Read-back rule (scenarios 2 and 4, round ends)") == (
        "read-back-rule-scenarios-2-and-4-round-ends"
    )
    assert slug("Guarded `write_file` / `edit_file`") == "guarded-write_file--edit_file"
    assert slug("4. Retrieval in English and Chinese, peers") == (
        "4-retrieval-in-english-and-chinese-peers"
    )
    assert anchors("# A\n## A\n```\n# A\n```\n## A\n") == {"a", "a-1", "a-2"}


def _targets(doc: Path) -> list[str]:
    prose = "\n".join(_prose(doc.read_text(encoding="utf-8")))
    links = [t for t in _LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]
    return links + _POINTER.findall(prose)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(doc: Path) -> None:
    bad = []
    for target in _targets(doc):
        path, _, anchor = target.partition("#")
        # README's pointers name docs/ from the root; a link is relative to its file.
        file = (doc.parent / path) if path else doc
        if path and not file.exists():
            file = ROOT / path
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(file.read_text(encoding="utf-8")):
            bad.append(f"{target}: no heading with that anchor in {file.name}")
    assert not bad, f"{doc.name}: {bad}"


def test_the_changelog_links_are_checked() -> None:
    # The changelog is mostly links: if the pattern stopped finding them this would pass
    # on nothing.
    assert len(_targets(ROOT / "CHANGELOG.md")) > 30
