"""In production the JWT settings are needed where tokens are verified or signed, only.

A migration job (``memstrata db upgrade`` / ``db status``) and the library authenticate
nobody, so they run without MEMSTRATA_JWT_SECRET; ``memstrata serve``, ``create_app`` and
``memstrata token`` refuse at start-up, in one line, before serving or signing anything.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from memstrata.api import create_app
from memstrata.api.token_keys import AuthConfigurationError, mint_token
from memstrata.config import Settings
from memstrata.serve_process import free_port, start_serve
from tests.cli.cli_env import clean_env, run_cli

NO_KEY = "MEMSTRATA_ENVIRONMENT=production needs MEMSTRATA_JWT_SECRET or MEMSTRATA_JWT_PUBLIC_KEY"
SHORT = "MEMSTRATA_JWT_SECRET must be at least 32 characters in production"


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """A clean production environment with no JWT setting (and no stray .env file)."""
    return clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_ENVIRONMENT": "production",
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_LOG_JSON": "false",
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        },
    )


@pytest.mark.timeout(180)
def test_a_migration_job_needs_no_jwt_secret(
    production: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded database, migrated and then read, as a Kubernetes Job would."""
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", "embedded")
    code, out, err = run_cli("db", "upgrade")
    assert code == 0, err
    assert out.startswith("database at revision ")
    revision = out.split()[3]  # "database at revision R (…)"
    code, out, err = run_cli("db", "status")
    assert code == 0, err
    assert f"current     {revision}" in out and "up_to_date  True" in out
    assert Path(production["MEMSTRATA_DATA_DIR"], "pgdata").is_dir()
    assert not Path(production["MEMSTRATA_DATA_DIR"], "jwt_secret").exists()


@pytest.mark.parametrize(("secret", "message"), [(None, NO_KEY), ("s" * 31, SHORT)])
def test_create_app_and_mint_token_refuse(
    tmp_path: Path, pg_url: str, secret: str | None, message: str
) -> None:
    settings = Settings(
        environment="production", database_url=pg_url, data_dir=tmp_path, jwt_secret=secret
    )
    with pytest.raises(AuthConfigurationError, match=message):
        create_app(settings)
    with pytest.raises(AuthConfigurationError, match=message):
        mint_token(settings, "alice", 60)
    # 32 characters is enough; nothing was generated in the data directory
    enough = settings.model_copy(update={"jwt_secret": "s" * 32})
    assert mint_token(enough, "alice", 60)
    assert create_app(enough).title == "memstrata"
    assert not (tmp_path / "jwt_secret").exists()


@pytest.mark.parametrize(("secret", "message"), [(None, NO_KEY), ("s" * 31, SHORT)])
def test_token_refuses(
    production: dict[str, str], monkeypatch: pytest.MonkeyPatch, secret: str | None, message: str
) -> None:
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", "embedded")
    if secret is not None:
        monkeypatch.setenv("MEMSTRATA_JWT_SECRET", secret)
    code, out, err = run_cli("token", "--user", "alice")
    assert (code, out) == (1, "")
    assert err.strip().startswith(f"error: {message}") and len(err.strip().splitlines()) == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("secret", "message"), [(None, NO_KEY), ("s" * 31, SHORT)])
def test_serve_refuses_before_serving_anything(
    production: dict[str, str], pg_url: str, secret: str | None, message: str
) -> None:
    """A real ``memstrata serve`` process: exit 1 with the one line, nothing ever answered."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        **production,
        "MEMSTRATA_DATABASE_URL": pg_url,
    }
    if secret is not None:
        env["MEMSTRATA_JWT_SECRET"] = secret
    port = free_port()
    process = start_serve(env, port, stderr=subprocess.PIPE, text=True)
    answered = False
    deadline = time.monotonic() + 60
    try:
        while process.poll() is None and time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                answered = True
            except httpx.TransportError:
                time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 1, err
    assert not answered
    assert err.strip().splitlines()[-1].startswith(f"error: {message}"), err
    assert "Traceback" not in err


@pytest.mark.timeout(60)
def test_serve_refuses_before_it_opens_the_database(production: dict[str, str]) -> None:
    """The key check comes first: with no database to reach, the refusal is still the key
    one (no connection attempt, no embedding server started, no migration)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        **production,
        "MEMSTRATA_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nothing",
    }
    process = start_serve(env, free_port(), stderr=subprocess.PIPE, text=True)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1, err
    assert err.strip().splitlines()[-1].startswith(f"error: {NO_KEY}"), err
