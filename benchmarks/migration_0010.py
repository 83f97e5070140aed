"""What migration 0010 (``embedding_claimed_by`` and its partial index) costs on a table of
N rows: ``python benchmarks/migration_0010.py --rows 200000 --repeats 5``.

Rows are written at their real width (a 600-character text and a padded ``vector(2560)``),
then the migration is undone and redone ``--repeats`` times on the same warm table; the
median and the slowest upgrade are printed (docs/DEPLOY.md, section 2)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alembic import command
from sqlalchemy import text

from benchmarks.scratch import scratch_runtime
from memstrata.db.migrate import alembic_config, upgrade

FILL = """
INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, embedding,
                               embedding_model)
SELECT 'u' || (g % 100), 'sessions/s' || g || '/0', 0, repeat('memory text ', 50),
       array_fill(0.01::real, ARRAY[2560])::vector, 'm'
FROM generate_series(1, :rows) AS g
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with scratch_runtime("mig0010-") as mem:
        engine = mem.db.engine
        with engine.begin() as conn:
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0009")
            conn.execute(text(FILL), {"rows": args.rows})
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE memory_embeddings"))
        times = []
        for _ in range(args.repeats):
            began = time.perf_counter()
            if upgrade(engine) != "0010":
                raise SystemExit("the upgrade did not reach 0010")
            times.append(time.perf_counter() - began)
            with engine.begin() as conn:
                cfg = alembic_config(engine)
                cfg.attributes["connection"] = conn
                command.downgrade(cfg, "0009")
        upgrade(engine)
        print(
            f"rows {args.rows}: upgrade 0009 -> 0010 median {statistics.median(times):.3f} s, "
            f"slowest {max(times):.3f} s over {args.repeats}"
        )


if __name__ == "__main__":
    main()
