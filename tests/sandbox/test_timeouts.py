"""The deadline on sandbox calls (``memstrata.sandbox.timed``), against a hanging remote.

The sandbox behind the deadline is a real directory reached through ``tests.sandbox.slow``,
whose link hangs the chosen calls. Each test bounds its own wait, so without the deadline
it fails instead of hanging.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.errors import SandboxError, SandboxPathError
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.timed import with_deadline
from tests.sandbox.slow import Link, RemoteProvider
from tests.sandbox.support import USER, sync_events

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.3
# Scheduling slack on a busy two-core machine; far below the fake's hang.
SLACK_S = 1.5


@pytest.fixture
def link() -> Link:
    return Link()


@pytest.fixture
def remote(provider: LocalSandboxProvider, link: Link) -> RemoteProvider:
    return RemoteProvider(provider, link)


async def test_a_hung_call_is_abandoned_after_the_timeout(
    remote: RemoteProvider, link: Link, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox = with_deadline(remote, TIMEOUT_S).for_user(USER, "s1")
    link.hang_all()
    started = time.monotonic()
    with anyio.fail_after(TIMEOUT_S + SLACK_S), pytest.raises(SandboxError) as raised:
        await sandbox.read_text("USER.md")
    took = time.monotonic() - started

    assert TIMEOUT_S - 0.05 <= took < TIMEOUT_S + SLACK_S
    assert "read_text of 'USER.md' did not finish within 0.3 s" in str(raised.value)
    await anyio.sleep(0)  # the abandoned call's cancellation is delivered
    assert link.cancelled == 1
    [event] = sync_events(caplog, "sandbox.timeout")
    assert event["user_id"] == USER and event["session_id"] == "s1"
    assert (event["operation"], event["path"], event["timeout_s"]) == (
        "read_text",
        "USER.md",
        TIMEOUT_S,
    )
    assert "did not finish within" in event["error"]


async def test_fast_calls_pass_through_unchanged(
    provider: LocalSandboxProvider, remote: RemoteProvider, link: Link
) -> None:
    timed = with_deadline(remote, TIMEOUT_S)
    assert timed.inner is remote
    sandbox = timed.for_user(USER)
    assert sandbox.case_sensitive is remote.for_user(USER).case_sensitive

    await sandbox.write_text("notes/a.md", "α\n")
    assert await sandbox.read_text("notes/a.md") == "α\n"
    assert await sandbox.read_text("missing.md") is None
    assert await sandbox.exists("notes/a.md") is True
    assert await sandbox.list("notes/") == ["notes/a.md"]
    await sandbox.delete("notes/a.md")
    assert await provider.for_user(USER).list() == []
    with pytest.raises(SandboxPathError):  # the sandbox's own errors are its own
        await sandbox.read_text("../elsewhere.md")
    assert [op for op, _ in link.calls] == [
        "write_text",
        "read_text",
        "read_text",
        "exists",
        "list",
        "delete",
        "read_text",
    ]


async def test_a_sandbox_that_timed_out_fails_fast_for_one_timeout(
    remote: RemoteProvider, link: Link
) -> None:
    """One sync step makes three calls (read, base record, write): a hung sandbox costs
    one timeout, not three; other sandboxes of the user are not affected."""
    timed = with_deadline(remote, TIMEOUT_S)
    sandbox = timed.for_user(USER)
    link.hang_all()
    with anyio.fail_after(TIMEOUT_S + SLACK_S), pytest.raises(SandboxError):
        await sandbox.read_text("USER.md")
    link.heal()
    calls = len(link.calls)

    started = time.monotonic()
    with pytest.raises(SandboxError, match=r"write_text of 'USER\.md' skipped"):
        await timed.for_user(USER).write_text("USER.md", "x")  # a new handle, same sandbox
    assert time.monotonic() - started < TIMEOUT_S
    assert len(link.calls) == calls  # not even tried
    await timed.for_user(USER, "s1").write_text("USER.md", "session")  # another sandbox

    await anyio.sleep(TIMEOUT_S)
    await sandbox.write_text("USER.md", "y")  # tried again after one timeout
    assert await sandbox.read_text("USER.md") == "y"


async def test_a_call_that_ignores_cancellation_is_left_running(
    remote: RemoteProvider, link: Link, caplog: pytest.LogCaptureFixture
) -> None:
    """A call that swallows its cancellation runs on: the caller still gets its error on
    time, and no later call to that sandbox overtakes it while it runs."""
    caplog.set_level("INFO", logger="memstrata.sandbox.timed")
    sandbox = with_deadline(remote, TIMEOUT_S).for_user(USER)
    link.ignore_cancel = True
    link.hang_writes()
    try:
        with anyio.fail_after(TIMEOUT_S + SLACK_S), pytest.raises(SandboxError):
            await sandbox.write_text("MEMORY.md", "late")
        await anyio.sleep(TIMEOUT_S * 1.5)  # the cool-down is over; the call is not
        assert link.cancelled == 1
        link.heal()
        with pytest.raises(SandboxError, match="timed out and is still running"):
            await sandbox.write_text("MEMORY.md", "newer")
    finally:
        link.gate.set()
    with anyio.fail_after(SLACK_S):
        while not sync_events(caplog, "sandbox.abandoned_ended"):
            await anyio.sleep(0.01)
    [ended] = sync_events(caplog, "sandbox.abandoned_ended")
    assert (ended["operation"], ended["outcome"]) == ("write_text", "completed")
    assert await remote.for_user(USER).inner.read_text("MEMORY.md") == "late"

    await sandbox.write_text("MEMORY.md", "newer")
    assert await sandbox.read_text("MEMORY.md") == "newer"


def test_the_timeout_is_a_setting_above_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert Settings(data_dir=tmp_path).sandbox_timeout_s == 5.0
    monkeypatch.setenv("MEMSTRATA_SANDBOX_TIMEOUT_S", "2.5")
    assert Settings(data_dir=tmp_path).sandbox_timeout_s == 2.5
    for bad in ("0", "-1", "inf", "nan"):
        monkeypatch.setenv("MEMSTRATA_SANDBOX_TIMEOUT_S", bad)
        with pytest.raises(ValidationError, match="sandbox_timeout_s"):
            Settings(data_dir=tmp_path)
