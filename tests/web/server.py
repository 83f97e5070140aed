"""A real ``memstrata serve`` process for the browser tests and the screenshot script."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt

SERVE = (sys.executable, "-c", "from memstrata.cli import main; main()", "serve")
SECRET = "web-tests-secret-that-is-long-enough-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Serve:
    """``memstrata serve`` on a free loopback port; output goes to files (never a pipe that
    nobody reads, which would block a chatty server)."""

    workdir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stdout(self) -> str:
        return (self.workdir / "serve.out").read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return (self.workdir / "serve.err").read_text(errors="replace")

    def start(self, timeout_s: float = 60) -> Serve:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
        env |= {
            "MEMSTRATA_DATA_DIR": str(self.workdir / "data"),
            "MEMSTRATA_ENVIRONMENT": "development",
            "MEMSTRATA_JWT_SECRET": SECRET,
            "MEMSTRATA_LOG_JSON": "false",
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
            **self.env,
        }
        with (
            (self.workdir / "serve.out").open("wb") as out,
            (self.workdir / "serve.err").open("wb") as err,
        ):
            self.process = subprocess.Popen(
                [*SERVE, "--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                stdout=out,
                stderr=err,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"memstrata serve exited:\n{self.stdout}\n{self.stderr}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"memstrata serve not ready in {timeout_s} s:\n{self.stderr}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def token(self, user: str, ttl_s: float = 600) -> str:
        claims: dict[str, Any] = {"sub": user, "exp": int(time.time() + ttl_s)}
        return jwt.encode(claims, SECRET, "HS256")

    def rest(self, user: str) -> httpx.Client:
        """An API client for ``user``: the other writer (a platform, an agent) in the tests."""
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token(user)}"},
            timeout=120,
        )
