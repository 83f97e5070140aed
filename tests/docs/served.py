"""The docs as the tests read them, and the one ``memstrata serve`` their examples run on.

The docs send requests to ``http://127.0.0.1:8700`` and call ``.venv/bin/memstrata``; the
one substitution made in what they show is the test server's address and this
interpreter's ``bin`` directory for those.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.docs.answers import Answer

ROOT = Path(__file__).parents[2]
DOC_URL = "http://127.0.0.1:8700"  # where the docs' examples send their requests
BIN = Path(sys.executable).parent  # the docs' `.venv/bin/`
USER = "alice"  # the docs' user
# $TOKEN's user where an example takes $TOKEN as given: the docs' transcripts mint alice's
# themselves, and README's expects her to be new, whichever test runs first.
READER = "bob"


def doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def prose(name: str) -> str:
    """The doc with every run of white space as one space: a sentence read across lines."""
    return " ".join(doc(name).split())


def blocks(name: str, language: str, containing: str) -> list[str]:
    """The fenced blocks of ``language`` ("" for none) in ``name`` holding ``containing``."""
    found = re.findall(rf"```{language}\n(.*?)```", doc(name), re.S)
    return [b for b in found if containing in b]


@dataclass(frozen=True)
class Run:
    """What one command did."""

    command: str
    code: int
    stdout: str
    stderr: str

    def answer(self) -> Answer:
        shows_head = re.search(r"curl\s+-\w*i", self.command) is not None
        return Answer.read(self.stdout, with_head=shows_head)


@dataclass(frozen=True)
class Served:
    url: str
    env: dict[str, str]  # the server's environment: the CLI run with it signs its tokens
    sandboxes: Path
    token: str  # READER's, for examples that take $TOKEN as given

    def sh(self, *commands: str) -> list[Run]:
        """``commands`` in one bash, in the repository (the docs' working directory), so
        that a variable one sets is there for the next; each one's output kept apart."""
        out = Path(self.env["MEMSTRATA_DATA_DIR"]).parent / f"sh-{uuid.uuid4().hex}"
        out.mkdir()
        script = ["set -u"]
        for i, command in enumerate(commands):
            local = command.replace(DOC_URL, self.url).replace(".venv/bin/", f"{BIN}/")
            # A group on lines of its own: a command may end in a comment.
            script.append(f"{{\n{local}\n}} >{out}/{i}.out 2>{out}/{i}.err; echo $? >{out}/{i}.rc")
        env = {**self.env, "TOKEN": self.token, "API": self.url}  # unless a command sets them
        env["PATH"] = f"{BIN}:{env['PATH']}"  # the docs' bare `memstrata` (venv activated)
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1"  # curl would ask a configured proxy
        subprocess.run(["bash", "-c", "\n".join(script)], cwd=ROOT, env=env, timeout=120)
        return [
            Run(command, int((out / f"{i}.rc").read_text()), *_output(out, i))
            for i, command in enumerate(commands)
        ]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``memstrata ARGS`` with the server's settings."""
        command = [str(BIN / "memstrata"), *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)


def _output(out: Path, i: int) -> tuple[str, str]:
    # Bytes decoded as they are: read_text() would turn HTTP's CR LF into LF.
    return (out / f"{i}.out").read_bytes().decode(), (out / f"{i}.err").read_bytes().decode()


@contextmanager
def serving(pg_url: str, embedder: LocalEmbeddingServer, workdir: Path) -> Iterator[Served]:
    """``memstrata serve`` in development (the docs' dev secret, which ``memstrata token``
    reads) on the given database and embedding server."""
    spec = embedder.model_spec
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env |= {
        "MEMSTRATA_DATA_DIR": str(workdir / "data"),
        "MEMSTRATA_ENVIRONMENT": "development",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_MODELS": f"[{spec.model_dump_json()}]",
        "MEMSTRATA_EMBEDDING_MODEL": spec.name,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_LOG_LEVEL": "WARNING",
    }
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "serve.log"  # a file: a full pipe would stall the server
    with log.open("wb") as output:
        process = start_serve(env, port, stdout=output, stderr=output)
    try:
        wait_ready(process, url, timeout_s=60, output=lambda: log.read_text(errors="replace"))
        served = Served(url, env, workdir / "data" / "sandboxes", "")
        token = served.cli("token", "--user", READER)
        assert token.returncode == 0, token.stderr
        yield Served(url, env, served.sandboxes, token.stdout.strip())
    finally:
        stop_serve(process)
