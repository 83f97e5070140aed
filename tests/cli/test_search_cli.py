"""`memstrata search`, `reindex` and `bench` through Typer's runner, on the test database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.db.database import Database
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval import snapshot
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.snapshot import SnapshotWriter
from tests.retrieval.test_snapshot_backfill import other_replica_backfilling


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, pg_url: str, tmp_path: Path) -> None:
    for key in ("MEMSTRATA_EMBEDDING_BASE_URL", "MEMSTRATA_EMBEDDING_MODEL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", pg_url)
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "false")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args))
    return result.exit_code, result.output


def test_search_json_and_text(env: None, db: Database) -> None:
    Indexer(db.sessions, None).index_turn("u", "s", 0, "the blue door is in Lisbon", "")
    code, out = invoke("search", "--user", "u", "--json", "blue door")
    assert code == 0, out
    payload = json.loads(out.strip().splitlines()[-1])
    assert payload["mode"] == "bm25"
    assert [h["file_path"] for h in payload["hits"]] == ["sessions/s/0"]
    assert payload["hits"][0]["explain"]["bm25_rank"] == 1
    code, out = invoke("search", "--user", "u", "blue door")
    assert code == 0 and "1. [conversation] sessions/s/0#0" in out and "bm25_rank=1" in out
    code, out = invoke("search", "--user", "nobody", "blue door")
    assert code == 0 and "no results" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--top-k", "0"], "top_k must be an integer from 1 to 100"),
        (["--source", "emails"], "sources must be a non-empty list"),
        (["--user", "x" * 101], "user_id is longer than 100"),
    ],
)
def test_search_bad_input(env: None, db: Database, args: list[str], message: str) -> None:
    base = ["search", "--user", "u", "query"]
    if args[0] == "--user":
        base = ["search", "query"]
    code, out = invoke(*base, *args)
    assert code == 1 and message in out


def test_reindex_without_embeddings_says_how_to_fix(env: None, db: Database) -> None:
    code, out = invoke("reindex", "--user", "u")
    assert code == 1 and "MEMSTRATA_EMBEDDING_BASE_URL" in out


def test_bench_locomo_bad_input(env: None, tmp_path: Path) -> None:
    code, out = invoke("bench", "locomo", str(tmp_path / "missing.json"))
    assert code == 1 and "is not a file" in out
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    code, out = invoke("bench", "locomo", str(bad), "--k", "five")
    assert code == 1 and "--k must be a comma-separated list" in out
    code, out = invoke("bench", "locomo", str(bad), "--hits", "0")
    assert code == 1 and "--hits must be between 1 and 100, got 0" in out


def test_bench_latency_bad_input(env: None) -> None:
    code, out = invoke("bench", "latency", "--chunks", "0")
    assert code == 1 and "--chunks >= 1" in out


def test_bench_locomo_end_to_end(
    env: None, db: Database, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "true")
    turns = [
        ("A", "D1:1", "I finally adopted a golden retriever puppy called Biscuit."),
        ("B", "D1:2", "That is wonderful news, congratulations!"),
        ("A", "D1:3", "My sister moved to Lisbon to work as an architect."),
        ("B", "D1:4", "Lisbon is a beautiful city for architecture."),
    ]
    data = [{
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "A", "speaker_b": "B",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": s, "dia_id": d, "text": t} for s, d, t in turns],
        },
        "qa": [
            {"question": "What is the name of A's puppy?", "evidence": ["D1:01"], "category": 1},
            {"question": "Where did A's sister move?", "evidence": ["D1:3"], "category": 4},
            {"question": "adversarial", "evidence": ["D1:2"], "category": 5},
        ],
    }]  # fmt: skip
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    code, out = invoke("bench", "locomo", str(path), "--k", "2", "--database-url", pg_url)
    assert code == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["questions"] == 2
    assert set(result["recall"]) == {
        "bm25", "vector", "hybrid", "hybrid_spec_decay", "hybrid_spec_decay_pool",
        "hybrid_floor0.9", "hybrid_convex", "hybrid_convex_spec_decay",
        "peer_bm25s", "peer_dense", "peer_rrf", "peer_rrf_spec_decay",
    }  # fmt: skip
    assert result["recall"]["bm25"]["2"] == 1.0
    assert result["recall"]["hybrid"]["2"] == 1.0
    assert result["recall"]["hybrid_convex"]["2"] == 1.0
    assert result["recall"]["peer_bm25s"]["2"] == 1.0
    assert (result["rows"], result["rows_with_vectors"]) == (4, 4)
    # --hits sets how many hits each question fetches (here 1 instead of 10).
    code, out = invoke(
        "bench", "locomo", str(path), "--k", "1", "--hits", "1", "--no-peers",
        "--database-url", pg_url,
    )  # fmt: skip
    assert code == 0, out
    shallow = json.loads(out.strip().splitlines()[-1])
    assert shallow["questions"] == 2 and set(shallow["recall"]["hybrid"]) == {"1"}
    assert "top-5 same at top_k=5 and top_k=1:" in out


def _tiny_madial(folder: Path) -> Path:
    folder.mkdir()
    events = {"1": "Bart在圣诞节晚会上跳舞", "3": "Bart获得一百米第一名", "4": "Bart吃了芒果冰淇淋"}
    (folder / "t-memory.json").write_text(
        "\n".join(
            json.dumps({k: {"time": "2023-05-01", "event": v, "user-id": 1}}, ensure_ascii=False)
            for k, v in events.items()
        ),
        encoding="utf-8",
    )
    dialogue = {
        "dialogue": ["<BOD>\n", '<Bart>:"我又想吃冰淇淋了"\n', '<Assistant>:"芒果味？"\n'],
        "test-turn": [2],
        "relevant-id": [4],
        "user-id": 1,
    }
    (folder / "t-dialogue.json").write_text(json.dumps(dialogue, ensure_ascii=False))
    return folder


def test_bench_madial_end_to_end(
    env: None, db: Database, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "true")
    folder = _tiny_madial(tmp_path / "madial")
    code, out = invoke("bench", "madial", str(folder), "--k", "1", "--database-url", pg_url)
    assert code == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["questions"] == 1
    assert result["recall"]["bm25"]["1"] == 1.0
    assert {"bm25_unigrams", "hybrid_unigrams"} <= set(result["recall"])


def test_bench_fails_loudly_without_vectors(
    env: None, db: Database, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_MODEL", "nobody")
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_MAX_RETRIES", "0")
    folder = _tiny_madial(tmp_path / "madial")
    code, out = invoke("bench", "madial", str(folder), "--database-url", pg_url)
    assert code == 1
    assert "3 of 3 rows have no vector" in out and "no figures reported" in out
    assert '"recall"' not in out


def test_bench_quality_bad_input(env: None, tmp_path: Path) -> None:
    code, out = invoke("bench", "madial", str(tmp_path / "nope"))
    assert code == 1 and "is not a directory" in out
    code, out = invoke("bench", "longmemeval", str(tmp_path / "nope.json.gz"))
    assert code == 1 and "is not a file" in out
    bad = tmp_path / "bad.json"
    bad.write_text("[{}]")
    code, out = invoke("bench", "longmemeval", str(bad))
    assert code == 1 and "cannot read the LongMemEval data" in out


def test_snapshots_writes_what_is_missing_and_says_so(
    env: None, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS", "2")
    indexer = Indexer(db.sessions, None)
    for turn in range(3):
        indexer.index_turn("u", "s", turn, f"turn {turn} about the blue door", "")
    code, out = invoke("snapshots")
    assert code == 0, out
    assert "u: 3 row(s) not in a snapshot" in out
    assert "wrote 1 snapshot(s) for 1 user(s) with 2+ conversation rows outside one" in out
    code, out = invoke("snapshots")
    assert code == 0 and "wrote 0 snapshot(s) for 0 user(s)" in out
    monkeypatch.setenv("MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS", "0")
    code, out = invoke("snapshots")
    assert code == 1 and "index snapshots are off" in out


def test_snapshots_counts_the_users_another_process_was_writing(
    env: None, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user whose snapshot another process (a server's pass, another run) is writing is
    left to it: the line counts those apart from the users whose snapshot was too large
    (the limit lowered for the test) or whose rows changed."""
    monkeypatch.setenv("MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS", "2")
    indexer = Indexer(db.sessions, None)
    for user in ("u", "v"):
        for turn in range(3):
            indexer.index_turn(user, "s", turn, f"turn {turn} about the green door", "")
    with other_replica_backfilling(db, "v"):
        code, out = invoke("snapshots")
    assert code == 0, out
    assert "wrote 1 snapshot(s) for 2 user(s) with 2+ conversation rows outside one" in out
    other = (
        "another process was writing, or had written by their turn (a server's own pass, "
        "another memstrata snapshots)"
    )
    assert f"1 user(s) got none: 1 {other}\n" in out
    for turn in range(3):
        indexer.index_turn("w", "s", turn, f"turn {turn} about the green door", "")
    monkeypatch.setattr(snapshot, "MAX_PAYLOAD_BYTES", 16)  # w's snapshot is too large
    with other_replica_backfilling(db, "v"):
        code, out = invoke("snapshots")
    assert code == 0, out
    assert "wrote 0 snapshot(s) for 2 user(s)" in out
    assert (
        f"2 user(s) got none: 1 {other}; 1 too large, or rows changed meanwhile (the log "
        "says which: index.snapshot.too_large / .skipped)\n"
    ) in out


def test_snapshots_says_what_to_do_when_a_write_does_not_finish(
    env: None, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS", "2")
    indexer = Indexer(db.sessions, None)
    for turn in range(2):
        indexer.index_turn("u", "s", turn, f"turn {turn} about the red door", "")
    # A write that never finishes (a stuck database): the wait gives up.
    monkeypatch.setattr(SnapshotWriter, "idle", lambda self, timeout=30.0: False)
    code, out = invoke("snapshots")
    assert code == 1
    assert "the snapshot of user 'u' was not written in time" in out
    assert "run it again to go on" in out


def test_reindex_drops_template_rows_an_older_release_indexed(
    env: None, db: Database, monkeypatch: pytest.MonkeyPatch, templates: TemplateSet
) -> None:
    from sqlalchemy import text

    from memstrata.memory.kinds import FileKind
    from memstrata.memory.store import MemoryStore

    own = templates.load(FileKind.USER) + "\nAllergic to peanuts.\n"
    MemoryStore(db.sessions, templates).provision_default_files("u")  # no indexer
    stored = MemoryStore(db.sessions, templates).get_memory_file("u", FileKind.USER)
    assert stored is not None
    MemoryStore(db.sessions, templates).upsert_memory_file("u", FileKind.USER, own, stored.version)
    Indexer(db.sessions, None).index_memory_file("u", FileKind.USER, own)  # the old rule
    query = "SELECT chunk_text FROM memory_embeddings WHERE user_id = 'u'"
    with db.engine.connect() as conn:
        assert any("Communication style" in t for (t,) in conn.execute(text(query)))

    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "true")
    # A just-started model on a busy CI host can take longer than the default 5 s + 1 s a
    # text; the row would then be stored without its vector (by design) and fail below.
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_TIMEOUT_S", "60")
    code, out = invoke("reindex", "--user", "u")

    assert code == 0, out
    assert "re-indexed 2 memory file(s)" in out
    with db.engine.connect() as conn:
        rows = conn.execute(text(query.replace("chunk_text", "chunk_text, embedding IS NULL")))
        assert [tuple(r) for r in rows] == [("Allergic to peanuts.", False)]


def test_reindex_of_an_unknown_user_fails_and_says_so(
    env: None, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped id printed "re-indexed 0 memory file(s)" and exited 0."""
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "true")
    code, out = invoke("reindex", "--user", "nobody-here")
    assert code == 1
    assert "no user 'nobody-here' in this database" in out and "memstrata user list" in out


def test_an_argument_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    """A Latin-1 terminal's é reached the search as a lone surrogate, and the error spoke of
    one: it now names the byte and the fix, before anything starts."""
    script = Path(sys.executable).parent / "memstrata"
    done = subprocess.run(
        [script, "search", b"caf\xe9", "--user", "u"],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.decode() == (
        "error: argument 2 has the byte 0xE9, which is not UTF-8: set the terminal to UTF-8 "
        "(e.g. LANG=C.UTF-8) and type it again\n"
    )
