"""A second service process for the AgentPool test: holds one cached entry and reports
on stdout when another process invalidates it.

Usage: python pool_child.py DATABASE_URL USER_ID
"""

from __future__ import annotations

import sys
import threading

from sqlalchemy import create_engine

from memstrata.agent.pool import AgentPool


def main() -> int:
    url, user_id = sys.argv[1], sys.argv[2]
    engine = create_engine(url)
    dropped = threading.Event()

    def on_invalidate(invalidated: str) -> None:
        if invalidated == user_id:
            print(f"invalidated {invalidated}", flush=True)
            dropped.set()

    pool: AgentPool[str] = AgentPool(engine, on_invalidate=on_invalidate)
    pool.get(user_id, lambda: "agent")  # the first get starts the listener
    print("ready" if pool.listening and user_id in pool else "not listening", flush=True)
    received = dropped.wait(30)
    print("dropped" if received and user_id not in pool else "still cached", flush=True)
    # Tell the parent back through the same channel: both directions work.
    pool.invalidate("from-child")
    pool.close()
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
