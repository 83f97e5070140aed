"""The library's examples as a platform engineer copies them: the README's and
docs/LIBRARY.md's complete example pass ``mypy --strict``, and LIBRARY.md's runs, on the
test database and embedding server, doing what the guide says it does.

(tests/test_readme.py runs the README's example on an embedded PostgreSQL of its own.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer

ROOT = Path(__file__).parents[2]


def _python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(encoding="utf-8"), re.S)


def readme_example() -> str:
    (block,) = _python_blocks("README.md")
    return block


def library_example() -> str:
    (block,) = [b for b in _python_blocks("docs/LIBRARY.md") if "def main() -> None:" in b]
    return block


def test_the_examples_pass_strict_mypy(tmp_path: Path) -> None:
    """The README's read ``f.content`` of a ``MemoryFile | None`` (union-attr)."""
    files = {"readme_example.py": readme_example(), "library_example.py": library_example()}
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), *files],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_library_example_runs_and_does_what_the_guide_says(
    db: Database, settings: Settings, embedding_server: LocalEmbeddingServer, tmp_path: Path
) -> None:
    """With the embedding API configured, so nothing is started: the memory tool's entry
    and the platform's own write_file of MEMORY.md (read back at the round's end) are both
    in the database, the search is hybrid, and the person's edit is in USER.md."""
    script = tmp_path / "example.py"
    script.write_text(library_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env |= {
        "MEMSTRATA_DATABASE_URL": str(settings.database_url),
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_EMBEDDING_MODELS": json.dumps([embedding_server.model_spec.model_dump()]),
        "MEMSTRATA_LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Recorded in MEMORY.md" in out, out
    assert "wrote MEMORY.md" in out, out
    assert "end_round: MEMORY.md written" in out, out
    assert "search (hybrid): ['sessions/chat-0/0'" in out, out
    assert "kept-aside agent copies: 0" in out, out
    with db.engine.connect() as conn:
        rows = dict(
            conn.execute(
                text("SELECT file_type, content FROM user_memory WHERE user_id = 'alice'")
            ).all()
        )
    assert "- 2026-03-01: Moved to Lyon" in rows["memory_md"]
    assert "Prefers short answers" in rows["memory_md"]
    assert rows["user_md"].endswith("\n- Likes oolong tea\n")
