"""An ``on_invalidate`` callback that records the users an AgentPool heard about."""

from __future__ import annotations

import threading
import time


class Recorder:
    def __init__(self) -> None:
        self.users: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, user_id: str) -> None:
        with self.lock:
            self.users.append(user_id)

    def seen(self, user_id: str) -> bool:
        with self.lock:
            return user_id in self.users

    def wait_for(self, user_id: str, timeout_s: float) -> bool:
        """Whether ``user_id`` was heard within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.seen(user_id):
                return True
            time.sleep(0.05)
        return False
