"""``memstrata bench``: retrieval quality (LoCoMo) and latency harnesses.

Benchmarks run on a throw-away embedded PostgreSQL in a temporary directory unless
``--database-url`` is given, so they never touch a real user's data.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from memstrata.cli.app import app, fail, load_settings, open_runtime
from memstrata.config import Settings
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
    base = load_settings()
    with tempfile.TemporaryDirectory(prefix="memstrata-bench-") as tmp:
        settings = Settings(
            **{
                **base.model_dump(),
                "data_dir": Path(tmp),
                "database_url": database_url,
                "embedding_autostart": embeddings,
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


@bench_app.command("locomo")
def locomo_command(
    path: Annotated[Path, typer.Argument(help="LoCoMo-format JSON file.")],
    k: Annotated[str, typer.Option("--k", help="Cut-offs, comma-separated.")] = "5,10",
    limit: Annotated[
        int | None, typer.Option("--limit", help="Only the first N conversations.")
    ] = None,
    grid: Annotated[
        bool, typer.Option("--decay-grid", help="Also score decay half-life/floor settings.")
    ] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Recall@k of BM25, vector, hybrid and hybrid with the spec's decay on LoCoMo.

    The last line printed is one JSON object with the recall figures.
    """
    from memstrata.bench.locomo import VARIANTS, run_locomo
    from memstrata.retrieval.search import DecayPolicy

    if not path.is_file():
        fail(
            f"{path} is not a file; pass a LoCoMo-format JSON file, such as locomo-dev.json "
            "from the LoCoMo dataset (github.com/snap-research/locomo, CC BY-NC 4.0)"
        )
    ks = parse_ks(k)
    variants = dict(VARIANTS)
    if grid:
        for half_life in (30.0, 90.0, 365.0):
            for floor in (0.0, 0.5, 0.8, 0.9):
                variants[f"decay_hl{half_life:g}_floor{floor:g}"] = {
                    "bm25": True,
                    "vector": True,
                    "decay": DecayPolicy(True, half_life, floor),
                }
    with bench_runtime(database_url) as mem:
        if mem.embedder is None:
            fail("no embedding API: configure one or leave MEMSTRATA_EMBEDDING_AUTOSTART on")
        try:
            result = run_locomo(
                mem,
                path,
                ks,
                variants=variants,
                limit=limit,
                progress=lambda m: typer.echo(m, err=True),
            )
        except (ValueError, KeyError) as exc:
            fail(f"{path} is not LoCoMo-format data: {exc}")
    typer.echo(
        f"indexed {result.rounds} turns in {result.index_seconds:.1f} s "
        f"({result.rounds / max(result.index_seconds, 1e-9):.1f} turns/s; "
        f"embedding {result.embed_seconds:.1f} s)",
        err=True,
    )
    if grid:
        for name, recall in result.recall.items():
            typer.echo(f"{name:32s} " + "  ".join(f"@{kk}={v:.4f}" for kk, v in recall.items()))
    typer.echo(result.to_json())


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
