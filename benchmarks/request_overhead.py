"""Sequential latency of the cheapest requests against a real ``memstrata serve``
(embeddings off): ``/healthz``, a memory-file GET and a stale If-Match PUT (409). One
client, one request at a time, so the figures are the server's per-request overhead.

    .venv/bin/python benchmarks/request_overhead.py --requests 300

Results in docs/BENCHMARKS.md (with and without uvloop + httptools: no difference).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import FILE, memstrata_serve, token


def timed(call: Callable[[], httpx.Response], count: int, expect: int) -> str:
    seconds = []
    for _ in range(count):
        began = time.perf_counter()
        status = call().status_code
        seconds.append(time.perf_counter() - began)
        if status != expect:
            sys.exit(f"expected {expect}, got {status}")
    ordered = sorted(seconds)
    p95 = ordered[round(0.95 * (len(ordered) - 1))]
    return f"median {statistics.median(seconds) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstrata-overhead-") as tmp:
        data = Path(tmp)
        with memstrata_serve(data, embeddings=False) as url:
            headers = {"Authorization": f"Bearer {token(data, 'u1')}"}
            with httpx.Client(base_url=url, trust_env=False, timeout=60) as client:
                first = client.get(FILE, headers=headers)
                stale = {**headers, "If-Match": first.headers["etag"]}
                content = first.json()["content"]
                client.put(FILE, json={"content": content + "x\n"}, headers=stale)
                n = args.requests
                print("healthz:", timed(lambda: client.get("/healthz"), n, 200))
                print("GET file:", timed(lambda: client.get(FILE, headers=headers), n, 200))
                body = {"content": content + "y\n"}
                put = lambda: client.put(FILE, json=body, headers=stale)  # noqa: E731
                print("stale PUT (409):", timed(put, n, 409))


if __name__ == "__main__":
    main()
