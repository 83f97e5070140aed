"""A write's deadline ended early (its caller gone): ``embedding_provider.passed``."""

from __future__ import annotations

import threading
import time

from memstrata.retrieval.embedding_provider import deadline_ends_when, passed


def test_a_deadline_passes_once_its_write_is_ended_and_only_inside_the_block() -> None:
    ahead = time.monotonic() + 3600
    ended = threading.Event()
    with deadline_ends_when(ended):
        assert not passed(ahead)
        ended.set()
        assert passed(ahead)
        # No deadline: no worker would embed what the write left, so it is never ended.
        assert not passed(None)
    assert not passed(ahead)  # another write's deadline, outside the block


def test_another_thread_s_write_is_not_ended() -> None:
    ahead = time.monotonic() + 3600
    ended = threading.Event()
    ended.set()
    seen: list[bool] = []
    with deadline_ends_when(ended):
        elsewhere = threading.Thread(target=lambda: seen.append(passed(ahead)))
        elsewhere.start()
        elsewhere.join()
        assert passed(ahead)
    assert seen == [False]
