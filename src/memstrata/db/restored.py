"""``memstrata db restored``: after a restore, lift every counter that clients or other
processes may hold a newer value of, so that none of their values matches again.

A restore takes the database back to the backup. The writes between the backup and the
disaster are gone, but what clients learnt of them is not: a web page, an agent or an MCP
client holding ETag "3" of a file the restore took back to version 2. One edit after the
restore made that file version 3 again, and the client's ``If-Match: "3"`` matched: its
write replaced the edit without a conflict (a lost update). So, once, before the replicas
start, in one transaction, each of these counters is lifted by :data:`RESTORE_STEP`:

* ``user_memory.version``: every version a client holds from before the restore is stale
  (a 409) — the spec's version stays an integer, and only grows;
* ``sandbox_synced.version`` (the version memstrata last left each sandbox file at,
  ``sandbox.synced``), by the same step, so it stays the file's version. A sandbox's base
  record (``.memstrata/base``) from before the restore is then older than that note and
  no longer trusted (``sandbox.rule.trusted``): a sandbox copy edited after the backup is
  written back while the DB is still at the version noted (the restore's loss
  recovered) and kept aside once the DB moved on. With ``user_memory`` lifted alone, such
  a record was trusted again and the DB copy pushed over the sandbox's newer one;
* ``memory_index_state``: generation, counted writes and removals, as one counted write
  that removed rows. A process still running with a search index from before the restore
  then compares its rows' ids with the database's; a restored generation would be reached
  again by as many writes, and the index taken for current;
* the ``memory_embeddings`` id sequence: new rows get ids above those of the rows such an
  index may hold and the restore took away (an index loads the rows above its largest id).

Index snapshots (``memory_index_snapshots``) are kept: ``pg_dump`` takes them in the same
snapshot as the rows they index, and a physical restore leaves the UNLOGGED table empty.

Run twice, it lifts twice: harmless, it only spends headroom (a version reaches the
integer column's bound after ~2,147 lifts; a lift that would pass it is refused, nothing
changed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import Connection, Engine, text

from memstrata.db.distribution import cross_user_tag
from memstrata.db.engine import describe
from memstrata.db.integers import MAX_INT
from memstrata.errors import DatabaseSetupError

# The lift: more than the writes one file could have had between a backup and the disaster
# that made it the one to restore (one a second for 11½ days), and than the search rows
# written meanwhile by all users, for the id sequence; 2,147 lifts from the versions'
# bound (``MAX_INT``).
RESTORE_STEP = 1_000_000

_TAG = cross_user_tag("restore.lift")
_SEQUENCE = "pg_get_serial_sequence('memory_embeddings', 'id')::regclass"

_MAY_SET_IDS = text(f"SELECT has_sequence_privilege({_SEQUENCE}, 'UPDATE'), current_user")
_HIGHEST = text(
    f"""{_TAG}
SELECT (SELECT max(version) FROM user_memory),
       (SELECT max(version) FROM sandbox_synced),
       greatest((SELECT max(id) FROM memory_embeddings), pg_sequence_last_value({_SEQUENCE})),
       (SELECT seqmax FROM pg_sequence WHERE seqrelid = {_SEQUENCE})
"""
)
# Counted in the database: a summary, not every row sent back.
_FILES = text(
    f"""{_TAG} WITH lifted AS (
    UPDATE user_memory SET version = version + :step RETURNING user_id)
SELECT count(*), count(DISTINCT user_id) FROM lifted"""
)
_SANDBOXES = text(
    f"""{_TAG} WITH lifted AS (
    UPDATE sandbox_synced SET version = version + :step RETURNING user_id, root, sandbox)
SELECT count(*), count(DISTINCT (user_id, root, sandbox)) FROM lifted"""
)
_INDEXES = text(
    f"""{_TAG} UPDATE memory_index_state SET generation = generation + :step,
    counted_writes = counted_writes + :step, removals = removals + :step"""
)
_IDS = text(f"{_TAG} SELECT setval({_SEQUENCE}, :value)")


@dataclass(frozen=True)
class Lifted:
    """What :func:`lift_after_restore` lifted (``memstrata db restored`` prints it)."""

    step: int
    files: int  # memory files (user_memory rows)
    users: int  # users with memory files
    sandbox_files: int  # sandbox_synced rows
    sandboxes: int  # distinct (user, sandbox provider, sandbox) of those rows
    index_states: int  # users' memory_index_state rows
    next_embedding_id: int  # the id the next search row gets
    highest_version: int | None  # of the memory files, after the lift

    def as_json(self) -> dict[str, int | None]:
        return asdict(self)


def lift_after_restore(engine: Engine, step: int = RESTORE_STEP) -> Lifted:
    """Lift every counter by ``step`` in one transaction (module doc). Raises
    ``DatabaseSetupError``, nothing changed, when a lift would pass a column's bound or
    the role may not set the id sequence."""
    with engine.begin() as conn:
        highest_file, last_id = _checked(conn, engine, step)
        files, users = conn.execute(_FILES, {"step": step}).one()
        notes, sandboxes = conn.execute(_SANDBOXES, {"step": step}).one()
        indexes = conn.execute(_INDEXES, {"step": step}).rowcount
        # Last: setval is not undone by a rollback (a gap in the ids would be harmless).
        conn.execute(_IDS, {"value": last_id + step})
    return Lifted(
        step=step,
        files=files,
        users=users,
        sandbox_files=notes,
        sandboxes=sandboxes,
        index_states=indexes,
        next_embedding_id=last_id + step + 1,
        highest_version=None if highest_file is None else highest_file + step,
    )


def _checked(conn: Connection, engine: Engine, step: int) -> tuple[int | None, int]:
    """The highest file version and search-row id, once a lift of each counter by
    ``step`` is known to fit; ``DatabaseSetupError`` when one does not."""
    may_set, role = conn.execute(_MAY_SET_IDS).one()
    if not may_set:
        raise DatabaseSetupError(
            f"role {role} may not set the sequence of memory_embeddings.id on "
            f"{describe(engine)} (it needs UPDATE on it, which replicas' roles lack): run "
            "`memstrata db restored` with MEMSTRATA_DATABASE_URL set to the URL of the role "
            "that owns the tables, as `memstrata db upgrade`; nothing was changed"
        )
    highest_file, highest_note, last_id, id_bound = conn.execute(_HIGHEST).one()
    for what, highest, bound in (
        ("a memory file's version", highest_file, MAX_INT),
        ("a sandbox's synced version", highest_note, MAX_INT),
        ("the id of memory_embeddings", last_id, id_bound),
    ):
        if highest is not None and highest + step > bound:
            raise DatabaseSetupError(
                f"a lift by {step} would take {what} past {bound} (the highest is "
                f"{highest}) on {describe(engine)}; nothing was changed. Clients that "
                "read a file before the restore can still write over later edits: have "
                "every client read its files again (reload the web page, restart agents "
                "and MCP clients) before anyone edits them"
            )
    return highest_file, last_id or 0
