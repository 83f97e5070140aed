"""A real ``memstrata serve`` process for the browser tests and the screenshot script."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.api.auth import bearer, token_of

SECRET = "web-tests-secret-that-is-long-enough-0123456789"


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
            self.process = start_serve(env, self.port, stdout=out, stderr=err)
        try:
            wait_ready(
                self.process,
                self.url,
                timeout_s=timeout_s,
                output=lambda: f"\n{self.stdout}\n{self.stderr}",
            )
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_serve(self.process)

    def token(self, user: str, ttl_s: float = 600) -> str:
        return token_of(user, SECRET, ttl_s)

    def rest(self, user: str) -> httpx.Client:
        """An API client for ``user``: the other writer (a platform, an agent) in the tests."""
        return httpx.Client(
            base_url=self.url,
            headers=bearer(self.token(user)),
            timeout=120,
        )
