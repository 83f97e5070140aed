"""``memstrata search``, ``memstrata reindex`` and ``memstrata snapshots``.

What they print of stored text (a hit's text and path, a user id) goes through
:func:`~memstrata.terminal.visible`: agents and API callers wrote it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import typer

from memstrata.cli.app import app, fail, guarded, load_settings, open_runtime
from memstrata.cli.db_failure import database_failures
from memstrata.cli.user_ids import UserJson, chosen_user, user_option
from memstrata.retrieval.limits import DEFAULT_TOP_K, MAX_TOP_K, SOURCES
from memstrata.terminal import json_text, visible


@app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="The user whose memory to search.")
    ] = None,
    user_json: UserJson = None,
    top_k: Annotated[
        int, typer.Option("--top-k", "-k", help=f"Results to return (1-{MAX_TOP_K}).")
    ] = DEFAULT_TOP_K,
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source",
            "-s",
            metavar="<source>",
            help=f"Restrict to a source: {', '.join(SOURCES)} (repeat it for several).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Hybrid search over one user's memory files and indexed conversations."""
    from memstrata.retrieval.search_input import check_search

    user = chosen_user(user, user_json)
    # Before the runtime: starting PostgreSQL and the embedding server took 5-7 s only to
    # say that -k 0 is out of range.
    guarded(lambda: check_search(user, query, top_k, source or None))
    with open_runtime(load_settings()) as mem:
        response = guarded(
            lambda: mem.search.search(user, query, top_k=top_k, sources=source or None)
        )
        empty = not (as_json or response.hits or guarded(lambda: mem.holds_user(user)))
    if as_json:
        typer.echo(json_text(response.to_dict()))
        return
    for warning in response.warnings:
        typer.secho(f"warning: {visible(warning)}", fg=typer.colors.YELLOW, err=True)
    if not response.hits:
        typer.echo(f"no results for {query!r} (user {visible(user)}, mode {response.mode})")
        if empty:
            # A mistyped id looked like a search that found nothing.
            typer.echo(
                f"user {visible(user)} has no memory files and no indexed conversations in "
                "this database (`memstrata user list` shows every user)"
            )
        return
    for rank, hit in enumerate(response.hits, 1):
        e = hit.explain
        typer.echo(
            f"{rank:2d}. [{hit.source}] {visible(str(hit.file_path))}#{hit.chunk_index} "
            f"score={hit.score:.5f} bm25_rank={e['bm25_rank']} vector_rank={e['vector_rank']} "
            f"decay={e['decay_factor']:.3f} ({hit.created_at:%Y-%m-%d})"
        )
        typer.echo("    " + visible(hit.text, lines=True).replace("\n", "\n    "))


# How long reindex waits at most, by default, for rows a running server's worker holds:
# the worker's lease (``retrieval.healing.LEASE_S``, 120 s) and a margin, so the rows of a
# worker that died mid-batch without its lock (claimed on the lease alone) are taken over
# rather than reported as still held; with its lock they are taken at once, or, after a
# network cut, once PostgreSQL finds its connection gone (about a minute).
HELD_WAIT_S = 150
# While it waits, a line when the count of held rows changes, and at least this often.
HELD_NOTICE_S = 10.0


@app.command("reindex")
def reindex_command(
    user: Annotated[str | None, typer.Option("--user", "-u", help="The user to re-embed.")] = None,
    user_json: UserJson = None,
    wait: Annotated[
        int,
        typer.Option(
            "--wait",
            min=0,
            metavar="SECONDS",
            help="At the end, how long to wait at most for the rows a running server's "
            "worker holds: for their vectors, or for its claim to run out (then this "
            "command embeds them). 0: do not wait.",
        ),
    ] = HELD_WAIT_S,
    batch: Annotated[
        int,
        typer.Option(
            "--batch",
            min=1,
            help="Rows embedded and stored at a time; progress is printed after each batch.",
        ),
    ] = 256,
) -> None:
    """Re-index a user's memory files, then embed rows stored without a vector (after an
    embedding outage, a model change, or an upgrade that changed what is indexed).

    Rows a running server's worker holds are left to it (it embeds them by itself); this
    waits for them at the end (`--wait`). Rows it gave back after the API failed them, and
    waits a while to retry, are embedded here at once."""
    from memstrata.retrieval.fill import take_over

    user = chosen_user(user, user_json)
    with open_runtime(load_settings(), require_embeddings=True) as mem:
        files = guarded(lambda: mem.reindex_memory_files(user))
        missing = guarded(lambda: mem.indexer.count_missing(user))
        # Before counting what is held: a dead run's claim is not a live worker's.
        taken = guarded(lambda: take_over(mem.db_sessions, user)) if missing else 0
        held = guarded(lambda: mem.indexer.count_held(user)) if missing else 0
        if missing:
            # On stderr, before the wait: a large backlog takes minutes, silently.
            typer.echo(
                f"embedding {missing} chunk(s) of {visible(user)} without a vector…", err=True
            )
        if taken:
            typer.echo(
                f"taking over {taken} chunk(s) claimed by a run that stopped (an earlier "
                "reindex cut off from the database, or a server's worker)",
                err=True,
            )
        if held:
            then = (
                f"then waits up to {wait} s for their vectors and embeds those whose claim runs out"
                if wait
                else "and does not wait for them (--wait 0)"
            )
            typer.echo(
                f"{held} of them are held by a running server's worker (`memstrata serve` "
                "embeds rows stored without a vector by itself): this command leaves them "
                f"to it, {then}",
                err=True,
            )
        with database_failures("memstrata reindex", after=_claims_left(user)):
            done = guarded(
                lambda: mem.indexer.fill_missing(
                    user,
                    batch,
                    progress=lambda n, total: typer.echo(
                        f"embedded {n} of {total} chunk(s)…", err=True
                    ),
                    wait_s=wait,
                    waiting=_held_notice(),
                )
            )
        left = guarded(lambda: mem.indexer.count_missing(user))
        held = guarded(lambda: mem.indexer.count_held(user)) if left else 0
        # Nothing done at all: a mistyped id "re-indexed 0 memory files" and looked done.
        if not (files or done or left) and not guarded(lambda: mem.holds_user(user)):
            fail(
                f"no user {user!r} in this database, so nothing was re-indexed; check the id "
                "(`memstrata user list` shows every user)"
            )
    typer.echo(
        f"re-indexed {files} memory file(s) and embedded {done} chunk(s) for {visible(user)}"
    )
    if missing > done + left:
        typer.echo(
            f"{missing - done - left} chunk(s) were embedded or replaced by another process "
            "meanwhile (a running server's worker)"
        )
    if left:
        # A job runner must see this: the vectors are still missing.
        why = "see the log"
        if held:
            others = "; the others: see the log" if held < left else ""
            why = (
                f"a running server's worker holds {held} of them after a wait of {wait} s "
                f"and embeds them by itself{others}"
            )
        fail(f"{left} chunk(s) of {user} still have no vector ({why}); run it again later")


def _claims_left(user: str) -> str:
    """What a fill the database failed under leaves behind, and how to go on: it gives the
    batch it claimed back when it can (``retrieval.fill``); with the database gone, that
    batch stays claimed until the run's lock is seen to end, which a rerun waits for."""
    return (
        "the chunks embedded so far are stored, and the batch being embedded stays claimed "
        "until PostgreSQL finds this run gone (at once after a restart, within about a "
        f"minute after a network cut): run `memstrata reindex {user_option(user)}` again, "
        "which takes it over"
    )


def _held_notice() -> Callable[[int, float], None]:
    """``fill_missing``'s ``waiting``: a line on stderr when the count of held rows
    changes, and every ``HELD_NOTICE_S`` while it does not."""
    said: list[tuple[int, float]] = []

    def notice(held: int, left_s: float) -> None:
        now = time.monotonic()
        if said and said[-1][0] == held and now - said[-1][1] < HELD_NOTICE_S:
            return
        said[:] = [(held, now)]
        typer.echo(
            f"waiting for {held} chunk(s) a running server's worker holds "
            f"({left_s:.0f} s left at most)…",
            err=True,
        )

    return notice


@app.command("snapshots")
def snapshots_command() -> None:
    """Write search-index snapshots ahead for users that lack one.

    After upgrading from a release without them, or after a database crash emptied them,
    so no user's first search has to load every row. Run it with the settings `memstrata
    serve` uses: snapshots are kept per embedding model."""
    from memstrata.retrieval.backfill import write_missing_snapshots

    settings = load_settings()
    if settings.index_snapshot_min_rows <= 0:
        fail("index snapshots are off: MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS is 0")
    with open_runtime(settings) as mem:
        try:
            done = write_missing_snapshots(
                mem.db.sessions,
                mem.search.model,
                settings.index_snapshot_min_rows,
                progress=lambda user, rows: typer.echo(
                    f"{visible(user)}: {rows} row(s) not in a snapshot"
                ),
            )
        except TimeoutError as exc:
            fail(f"{exc}; the snapshots written so far are kept: run it again to go on")
    typer.echo(
        f"wrote {done.written} snapshot(s) for {done.users} user(s) with "
        f"{settings.index_snapshot_min_rows}+ conversation rows outside one"
    )
    if done.failed:
        fail(f"{done.failed} snapshot write(s) failed; the log says why (index.snapshot.failed)")
    if done.written < done.users:
        # No write failed (that ended above): the others were too large or changed.
        counts = [
            (done.skipped, "another process was writing, or had written by their turn (a "
             "server's own pass, another memstrata snapshots)"),
            (done.users - done.written - done.skipped, "too large, or rows changed meanwhile "
             "(the log says which: index.snapshot.too_large / .skipped)"),
        ]  # fmt: skip
        reasons = "; ".join(f"{n} {why}" for n, why in counts if n)
        typer.echo(f"{done.users - done.written} user(s) got none: {reasons}")
