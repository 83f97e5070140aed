"""``memstrata bench``: retrieval quality (LoCoMo) and latency harnesses.

Benchmarks run on a throw-away embedded PostgreSQL in a temporary directory unless
``--database-url`` is given, so they never touch a real user's data.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memstrata.cli.app import app, fail, load_settings, open_runtime
from memstrata.errors import EmbeddingError

# The harness and the runtime (numpy, SQLAlchemy, Alembic) are imported by the bench
# commands when they run, not by every memstrata command that registers them.
if TYPE_CHECKING:
    from memstrata.bench.harness import Dataset, Variant
    from memstrata.runtime import Memstrata

bench_app = typer.Typer(help="Retrieval benchmarks.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Benchmark against this PostgreSQL (default: a temporary embedded server).",
    ),
]


@contextmanager
def bench_runtime(database_url: str | None, *, embeddings: bool = True) -> Iterator[Memstrata]:
    from memstrata.config import Settings

    base = load_settings()
    with tempfile.TemporaryDirectory(prefix="memstrata-bench-") as tmp:
        settings = Settings(
            **{
                **base.model_dump(),
                "data_dir": Path(tmp),
                "database_url": database_url,
                "embedding_autostart": embeddings,
                # Throughput, not latency: a batch of 64 long passages on a busy machine
                # can take longer than the interactive default of 10 s.
                "embedding_timeout_s": max(base.embedding_timeout_s, 300.0),
            }
        )
        with open_runtime(settings) as mem:
            yield mem


def parse_ks(value: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in value.split(",") if x.strip()})
    except ValueError:
        fail(f"--k must be a comma-separated list of integers such as 5,10, got {value!r}")
    if not ks or ks[0] < 1 or ks[-1] > 100:
        fail("--k values must be between 1 and 100")
    return ks


Limit = Annotated[
    int | None,
    typer.Option("--limit", help="Only the first N questions, balanced over question types."),
]
Ks = Annotated[str, typer.Option("--k", help="Cut-offs, comma-separated.")]
NoPeers = Annotated[
    bool, typer.Option("--no-peers", help="Skip the peer baselines (bm25s, dense, RRF).")
]
DepthGrid = Annotated[
    bool,
    typer.Option("--depth-grid", help="Also score minimum candidate depths 1–100."),
]
DEPTH_GRID = (1, 15, 30, 50, 100)
MAX_HITS = 100
Hits = Annotated[
    int | None,
    typer.Option(
        "--hits",
        help="Hits fetched per question (default 10; LongMemEval 50). Deeper, with --k "
        "10,20,50, shows how far down the misses are (the candidate pool grows with it: "
        "3 × hits a side).",
    ),
]


def _run_quality(
    name: str,
    load: Callable[[], Dataset],
    k: str,
    database_url: str | None,
    *,
    no_peers: bool,
    depths: bool,
    hits: int | None = None,
    extra: dict[str, Variant] | None = None,
) -> None:
    """Load, run, print a summary on stderr and the JSON object as the last line. The
    standard variants always; the minimum-depth grid with ``depths``; ``extra`` on top. A
    grid prints its table on stdout."""
    from memstrata.bench.harness import VARIANTS, BenchError, depth_grid, run

    variants = {**VARIANTS, **(depth_grid(DEPTH_GRID) if depths else {}), **(extra or {})}
    table = depths or bool(extra)
    peers = not no_peers

    ks = parse_ks(k)
    if hits is not None and not 1 <= hits <= MAX_HITS:
        fail(f"--hits must be between 1 and {MAX_HITS}, got {hits}")
    try:
        dataset = load()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        fail(f"cannot read the {name} data: {type(exc).__name__}: {exc}")
    if hits is not None:
        dataset.depth = hits
    with bench_runtime(database_url) as mem:
        if mem.embedder is None:
            fail("no embedding API: configure one or leave MEMSTRATA_EMBEDDING_AUTOSTART on")
        try:
            result = run(
                mem,
                dataset,
                ks,
                peers=peers,
                variants=variants,
                progress=lambda m: typer.echo(m, err=True),
            )
        except (BenchError, EmbeddingError) as exc:
            fail(f"{name} benchmark failed, no figures reported: {exc}")
    typer.echo(
        f"indexed {result.turns} turns in {result.index_seconds:.1f} s "
        f"({result.turns / max(result.index_seconds, 1e-9):.1f} turns/s) through the batch "
        f"path; {result.rows_with_vectors} of {result.rows} rows have vectors",
        err=True,
    )
    for score in dataset.scores:
        for variant, recall in result.table(score).items():
            line = "  ".join(f"@{kk}={v:.4f}" for kk, v in recall.items())
            typer.echo(f"{score:8s} {variant:24s} {line}", err=not table)
    for variant, same in result.stable.items():
        typer.echo(
            f"top-5 same at top_k=5 and top_k={dataset.depth}: {variant:28s} "
            f"{same / max(result.questions, 1):.4f}",
            err=not table,
        )
    for key, agg in sorted(result.by_kind.items()):
        typer.echo(f"by type  {key:56s} {agg['sum'] / agg['n']:.4f} (n={agg['n']:.0f})", err=True)
    typer.echo(result.to_json(dataset.scores))


def _need(path: Path, what: str, *, folder: bool = False) -> None:
    if folder and not path.is_dir():
        fail(f"{path} is not a directory; pass the folder holding {what}")
    if not folder and not path.is_file():
        fail(f"{path} is not a file; pass {what}")


@bench_app.command("locomo")
def locomo_command(
    path: Annotated[Path, typer.Argument(help="LoCoMo-format JSON file.")],
    k: Ks = "5,10",
    limit: Limit = None,
    grid: Annotated[
        bool, typer.Option("--decay-grid", help="Also score decay half-life/floor settings.")
    ] = False,
    depths: DepthGrid = False,
    hits: Hits = None,
    no_peers: NoPeers = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Recall@k (evidence turns) of memstrata's variants and the peers on LoCoMo.

    The last line printed is one JSON object with the recall figures.
    """
    from memstrata.bench.harness import Variant
    from memstrata.bench.locomo import locomo_dataset
    from memstrata.retrieval.ranking import DecayPolicy

    _need(path, "a LoCoMo-format JSON file (a list of conversations)")
    decay_grid: dict[str, Variant] = {}
    if grid:
        for half_life in (30.0, 90.0, 365.0):
            for floor in (0.0, 0.5, 0.8, 0.9):
                name = f"decay_hl{half_life:g}_floor{floor:g}"
                decay_grid[name] = Variant(True, True, DecayPolicy(True, half_life, floor))
    load = lambda: locomo_dataset(path, limit)  # noqa: E731
    _run_quality(
        "LoCoMo",
        load,
        k,
        database_url,
        no_peers=no_peers,
        depths=depths,
        hits=hits,
        extra=decay_grid,
    )


@bench_app.command("longmemeval")
def longmemeval_command(
    path: Annotated[Path, typer.Argument(help="LongMemEval_S-format .json or .json.gz file.")],
    k: Ks = "5,10",
    limit: Limit = None,
    depths: DepthGrid = False,
    hits: Hits = None,
    no_peers: NoPeers = False,
    database_url: DatabaseUrl = None,
) -> None:
    """recall_all@k and recall_any@k (answer sessions) on LongMemEval_S-format data."""
    from memstrata.bench.longmemeval import longmemeval_dataset

    _need(path, "a LongMemEval_S-format .json or .json.gz file")
    load = lambda: longmemeval_dataset(path, limit)  # noqa: E731
    _run_quality("LongMemEval", load, k, database_url, no_peers=no_peers, depths=depths, hits=hits)


@bench_app.command("madial")
def madial_command(
    path: Annotated[Path, typer.Argument(help="Folder with the dialogue and memory JSON files.")],
    k: Ks = "5,10",
    limit: Limit = None,
    depths: DepthGrid = False,
    hits: Hits = None,
    no_peers: NoPeers = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Recall@k of the relevant memory events on MADial-Bench (Chinese)."""
    from memstrata.bench.madial import madial_dataset

    _need(path, "the MADial-Bench dialogue and memory JSON files", folder=True)
    load = lambda: madial_dataset(path, limit)  # noqa: E731
    _run_quality("MADial", load, k, database_url, no_peers=no_peers, depths=depths, hits=hits)


@bench_app.command("latency")
def latency_command(
    chunks: Annotated[int, typer.Option("--chunks", help="Chunks of the measured user.")] = 10_000,
    others: Annotated[int, typer.Option("--others", help="Rows of other users.")] = 200_000,
    queries: Annotated[int, typer.Option("--queries", help="Timed queries.")] = 200,
    dim: Annotated[int, typer.Option("--dim", help="Vector dimension before padding.")] = 384,
    database_url: DatabaseUrl = None,
) -> None:
    """p50/p95 of search (query embedding excluded) vs an in-process bm25s + numpy bound."""
    from memstrata.bench.latency import run_latency

    if chunks < 1 or others < 0 or queries < 10 or not 1 <= dim <= 2560:
        fail("need --chunks >= 1, --others >= 0, --queries >= 10 and 1 <= --dim <= 2560")
    with bench_runtime(database_url, embeddings=False) as mem:
        result = run_latency(
            mem,
            chunks=chunks,
            others=others,
            queries=queries,
            dim=dim,
            progress=lambda m: typer.echo(m, err=True),
        )
    typer.echo(json.dumps(result))


@bench_app.command("http")
def http_command(
    locomo: Annotated[Path, typer.Argument(help="LoCoMo-format JSON file (texts, questions).")],
    chunks: Annotated[int, typer.Option("--chunks", help="Rows of the measured user.")] = 10_000,
    queries: Annotated[int, typer.Option("--queries", help="Timed questions per phase.")] = 200,
    restarts: Annotated[int, typer.Option("--restarts", help="Cold starts measured.")] = 3,
    database_url: DatabaseUrl = None,
) -> None:
    """End-to-end HTTP search latency (idle, while another user ingests, cold) and the
    batch endpoint's ingestion rate against the single-turn endpoint's."""
    from memstrata.bench.http_latency import run_http

    _need(locomo, "a LoCoMo-format JSON file")
    if chunks < 1 or queries < 10 or restarts < 1:
        fail("need --chunks >= 1, --queries >= 10 and --restarts >= 1")
    with bench_runtime(database_url) as mem:
        if mem.embedder is None:
            fail("no embedding API: configure one or leave MEMSTRATA_EMBEDDING_AUTOSTART on")
        try:
            result = run_http(
                mem,
                locomo,
                chunks=chunks,
                queries=queries,
                restarts=restarts,
                progress=lambda m: typer.echo(m, err=True),
            )
        except (RuntimeError, ValueError, KeyError) as exc:
            fail(f"HTTP benchmark failed, no figures reported: {exc}")
    typer.echo(json.dumps(result))
