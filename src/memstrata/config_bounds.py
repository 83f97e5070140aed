"""The upper bounds of the number settings, one definition each, with why.

A number setting without one took ``inf``, ``nan`` or ``1e10`` at start-up and failed at
its first use: a timeout past the platform's ``time_t`` ended every search in an
``OverflowError``, a heal interval of ``inf`` killed the re-embedding thread. Every float
setting is finite too (``allow_inf_nan=False`` on its field). Each bound lies far above
anything a deployment needs, so it refuses only a mistake (a unit slip, a value meant as
"never"); the field descriptions say which bound applies and why.
"""

from __future__ import annotations

# A timeout: how long one call (an HTTP request, a sandbox call, a wait for a slot) may
# take. An hour is past every client's and gateway's own timeout: a call that long has
# failed already for whoever waits on it.
MAX_TIMEOUT_S = 3600
TIMEOUT_WHY = f"at most {MAX_TIMEOUT_S} (an hour: past any client's or gateway's timeout)"
# A pause between two rounds of background work, or an idle session's life: a day.
MAX_INTERVAL_S = 86400
INTERVAL_WHY = f"at most {MAX_INTERVAL_S} (a day)"
# Estimated tokens of one text or request: far above any embedding model's context (e5:
# 512; the longest common ones 8192).
MAX_CHUNK_TOKENS = 8192
CHUNK_TOKENS_WHY = (
    f"at most {MAX_CHUNK_TOKENS} (the longest context of common embedding models; the "
    "model cuts what is past its own)"
)
MAX_REQUEST_TOKENS = 1_000_000
REQUEST_TOKENS_WHY = f"at most {MAX_REQUEST_TOKENS} (past any embedding API's request limit)"
# Texts in one embedding request: OpenAI's API takes 2048 at most.
MAX_BATCH_SIZE = 2048
# Retries double their pause each time (from 0.1 s, at most a minute apart): ten keep a
# write waiting minutes already, which is the circuit breaker's business.
MAX_RETRIES = 10
# Counts of things held in memory (users, query embeddings, sessions, candidates): the
# byte budgets bind long before; the bound catches a value typed as bytes.
MAX_COUNT = 1_000_000
COUNT_WHY = f"at most {MAX_COUNT}"
# Threads of a local embedding server, requests in flight, connections of a pool.
MAX_THREADS = 1024
# Bytes held in memory at once (a request body, a memory file, the search caches).
MAX_REQUEST_BYTES = 1024**3
MAX_CONTENT_BYTES_LIMIT = 64 * 1024**2
MAX_CACHE_BYTES = 1024**4
# A time-decay half-life: 100 years is no decay at all (turn it off: MEMSTRATA_DECAY=false).
MAX_HALF_LIFE_DAYS = 36500
# A bearer token's longest life memstrata accepts when it bounds them: past a year it
# bounds nothing (leave it unset for no bound).
MAX_TOKEN_LIFETIME_S = 366 * 86400
# Connections served at once: Linux's highest open-file limit (fs.nr_open's default).
MAX_CONNECTIONS = 1024 * 1024
