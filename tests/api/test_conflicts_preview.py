"""``GET /api/memory/conflicts``: each copy's ``preview`` shows what it changed.

Every copy of MEMORY.md starts with the same template header, and the preview was the
first 3 lines: every copy looked the same. The preview is now the copy's first lines that
the stored file does not have. Real app, real database, real directory sandbox.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient

from memstrata.config import Settings
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_conflicts import LIST, MEMORY, plant, stamp

HEADER = "---\nfile: MEMORY.md\npurpose: long-term memory\n---\n# MEMORY.md\n\n## Decisions\n"
STORED = HEADER + "- tea, not coffee\n\n## Ongoing\n- the move to Lyon\n"


def name(minute: int) -> str:
    return f"MEMORY.md.{stamp(datetime(2026, 3, 1, 12, minute, tzinfo=UTC))}.md"


def test_copies_of_one_file_preview_what_each_changed(
    client: TestClient, auth: AuthHeader, settings: Settings
) -> None:
    put = client.put(MEMORY, headers=auth("ada"), json={"content": STORED})
    assert put.status_code == 200, put.text
    plant(settings, "ada", name(1), STORED.replace("to Lyon", "to Marseille"))
    plant(settings, "ada", name(2), STORED + "- the move is off\n- sold the flat\n")
    plant(settings, "ada", name(3), STORED)

    body = client.get(LIST, headers=auth("ada")).json()

    assert [(c["name"], c["preview"]) for c in body["conflicts"]] == [
        (name(3), "---\nfile: MEMORY.md\npurpose: long-term memory"),  # nothing changed
        (name(2), "- the move is off\n- sold the flat"),
        (name(1), "- the move to Marseille"),
    ]


def test_a_user_with_no_stored_file_sees_the_first_lines(
    client: TestClient, auth: AuthHeader, settings: Settings, mem: Memstrata
) -> None:
    plant(settings, "bob", name(1), STORED + "- the move is off\n")
    [copy] = client.get(LIST, headers=auth("bob")).json()["conflicts"]
    assert copy["preview"] == "---\nfile: MEMORY.md\npurpose: long-term memory"
    # The stored file is read, never created: a listing provisions nobody.
    assert mem.store.get_memory_file("bob", FileKind.MEMORY) is None
