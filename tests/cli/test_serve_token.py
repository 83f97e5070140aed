"""``memstrata token`` through Typer's runner; ``memstrata serve`` as a real subprocess."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.serve_process import free_port, start_serve, wait_ready
from tests.cli.cli_env import clean_env, run_cli


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """A clean MEMSTRATA_* environment with its own data dir (and no stray .env file)."""
    return clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_ENVIRONMENT": "development",
            "MEMSTRATA_LOG_JSON": "false",
        },
    )


def test_token_uses_the_generated_dev_secret(env: dict[str, str]) -> None:
    code, out, err = run_cli("token", "--user", "alice", "--ttl", "120")
    assert code == 0
    # Which secret, on stderr (stdout is the token alone): a server with another data dir
    # refuses the token, and only its log said why.
    # The first token created the secret: most often in another directory than the
    # server's, so it says so.
    data = env["MEMSTRATA_DATA_DIR"]
    path = Path(data) / "jwt_secret"
    assert err.strip() == (
        f"created a new development secret in {path} and signed with it: only a server "
        f"started with MEMSTRATA_DATA_DIR={shlex.quote(data)} accepts this token (set the "
        "same MEMSTRATA_DATA_DIR as the server's)"
    )
    secret = path.read_text().strip()
    claims = jwt.decode(out.strip(), secret, algorithms=["HS256"])
    assert claims["sub"] == "alice"
    assert claims["exp"] - claims["iat"] == 120
    # the same secret next time
    code, again, err = run_cli("token", "--user", "bob")
    assert jwt.decode(again.strip(), secret, algorithms=["HS256"])["sub"] == "bob"
    assert err.strip() == f"signed with the development secret in {path}"


def test_token_uses_the_configured_secret(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_JWT_SECRET", "k" * 40)
    code, out, err = run_cli("token", "-u", "carol")
    assert code == 0 and err.strip() == "signed with MEMSTRATA_JWT_SECRET"
    assert jwt.decode(out.strip(), "k" * 40, algorithms=["HS256"])["sub"] == "carol"
    assert not (Path(env["MEMSTRATA_DATA_DIR"]) / "jwt_secret").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--user", ""], 1, "error: --user: user_id must be a non-empty string"),
        (["--user", "x" * 101], 1, "error: --user: user_id is longer than 100 characters"),
        (["--user", "a", "--ttl", "0"], 2, "Invalid value for '--ttl'"),
        (["--user", "a", "--ttl", "soon"], 2, "Invalid value for '--ttl'"),
        ([], 2, "Missing option '--user'"),
    ],
)
def test_token_bad_input(env: dict[str, str], args: list[str], code: int, message: str) -> None:
    exit_code, _, err = run_cli("token", *args)
    assert exit_code == code
    assert message in err


def test_token_refuses_a_ttl_the_server_would_refuse(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_JWT_MAX_LIFETIME_S", "600")
    code, out, err = run_cli("token", "--user", "alice")  # the default ttl: 3600
    assert (code, out) == (1, "")
    assert "--ttl 3600 is longer than MEMSTRATA_JWT_MAX_LIFETIME_S (600 s)" in err
    assert run_cli("token", "--user", "alice", "--ttl", "600")[0] == 0


def test_token_refuses_with_only_a_public_key(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    # A dev secret left over from before the key was configured is not used either: the
    # server would refuse its HS256 token.
    assert run_cli("token", "--user", "alice")[0] == 0
    assert (Path(env["MEMSTRATA_DATA_DIR"]) / "jwt_secret").exists()
    monkeypatch.setenv("MEMSTRATA_JWT_PUBLIC_KEY", pem)
    code, out, err = run_cli("token", "--user", "alice")
    assert (code, out) == (1, "")
    assert len(err.strip().splitlines()) == 1
    assert "issued by the identity provider that owns the private key" in err


def test_production_without_a_secret_refuses_to_start(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    monkeypatch.setenv("MEMSTRATA_ENVIRONMENT", "production")
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", pg_url)  # production needs one set
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_AUTOSTART", "false")
    for command in (["serve"], ["token", "--user", "a"]):
        code, _, err = run_cli(*command)
        assert code == 1
        assert "MEMSTRATA_ENVIRONMENT=production needs MEMSTRATA_JWT_SECRET" in err


def test_serve_refuses_a_busy_port_and_a_bad_one(env: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_cli("serve", "--port", str(port))
    assert code == 1
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in err
    code, _, err = run_cli("serve", "--port", "70000")
    assert code == 2
    assert "Invalid value for '--port'" in err


# -- the real server -----------------------------------------------------------------------


@pytest.fixture
def server_env(env: dict[str, str], pg_url: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        **env,
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
    }


def _start(server_env: dict[str, str], port: int) -> subprocess.Popen[str]:
    pipe = subprocess.PIPE
    return start_serve(server_env, port, stdout=pipe, stderr=pipe, text=True)


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.timeout(60)
def test_serve_starts_answers_and_stops(
    server_env: dict[str, str], stop: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = _start(server_env, port)
    stop.append(process)
    wait_ready(process, url, timeout_s=30, path="/healthz")
    assert httpx.get(f"{url}/readyz", timeout=5).json()["status"] == "ready"
    secret = (Path(server_env["MEMSTRATA_DATA_DIR"]) / "jwt_secret").read_text().strip()
    token = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, secret, "HS256")
    skills = httpx.get(
        f"{url}/api/config/skills", headers={"Authorization": f"Bearer {token}"}, timeout=5
    )
    assert skills.status_code == 200
    assert httpx.get(f"{url}/api/config/skills", timeout=5).status_code == 401
    # What start-up built is out of the cyclic collector's walks (cli.serve).
    frozen = [
        line
        for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines()
        if line.startswith("memstrata_gc_frozen_objects ")
    ]
    assert len(frozen) == 1 and float(frozen[0].split()[1]) > 50_000, frozen

    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=15)
    assert process.returncode == 0, err
    assert out.splitlines()[0] == (f"memstrata listening on {url}  (API docs: {url}/docs)")
    # The bare name only when another shell finds it (make installs into .venv/bin).
    how = "memstrata" if shutil.which("memstrata") else f"{Path(sys.executable).parent}/memstrata"
    # A data directory other than the default is named: another shell lacks the variable.
    data_dir = shlex.quote(server_env["MEMSTRATA_DATA_DIR"])
    assert f"  get a token MEMSTRATA_DATA_DIR={data_dir} {how} token --user alice" in (
        out.splitlines()
    )
    assert "  embeddings  none: BM25-only search" in out.splitlines()
    assert err.count("No embedding API configured") == 1, err  # said once, not per lookup


@pytest.mark.timeout(90)
def test_serve_starts_and_stops_the_local_embedding_server(
    server_env: dict[str, str], stop: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = _start({**server_env, "MEMSTRATA_EMBEDDING_AUTOSTART": "true"}, port)
    stop.append(process)
    wait_ready(process, url, timeout_s=60, path="/healthz")
    assert process.stdout is not None
    banner = [process.stdout.readline().rstrip("\n") for _ in range(4)]
    prefix = "  embeddings  local multilingual-e5-small at "
    assert banner[3].startswith(prefix), banner
    embeddings_url = banner[3].removeprefix(prefix)
    assert httpx.get(embeddings_url.removesuffix("/v1") + "/health", timeout=5).status_code == 200

    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=20)
    assert process.returncode == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(embeddings_url.removesuffix("/v1") + "/health", timeout=2)


def test_help_shows_where_serve_defaults_come_from() -> None:
    # Typer's "rich" markup read "[default: …]" in a help text as a style tag and dropped
    # it, leaving "Bind address ."; docstrings also kept their 100-column line breaks.
    result = CliRunner().invoke(build_app(), ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "[default: MEMSTRATA_HOST or 127.0.0.1]" in result.output
    assert "[default: MEMSTRATA_PORT or 8700]" in result.output
    snapshots = CliRunner().invoke(build_app(), ["snapshots", "--help"], env={"COLUMNS": "200"})
    assert "so no user's first search has to load every row" in snapshots.output
