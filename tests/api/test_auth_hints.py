"""A 401 on the development secret says how to get a token this server takes; with an
explicit key (production) it says nothing of the server's set-up."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.api.auth import AuthenticationError, Authenticator, mint_token
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.api.auth import bearer

SECRET = "explicit-secret-that-is-long-enough-0123456789"


def _dev(data_dir: Path) -> Settings:
    return Settings(environment="development", data_dir=data_dir)


def _refusal(settings: Settings, token: str) -> str:
    with pytest.raises(AuthenticationError) as refused:
        Authenticator.from_settings(settings).user_id(token)
    assert refused.value.status_code == 401
    return str(refused.value.detail)


def test_a_token_of_another_data_directory_names_the_servers(tmp_path: Path) -> None:
    server = _dev(tmp_path / "server data")
    # `memstrata token` without the server's MEMSTRATA_DATA_DIR: a secret of its own.
    elsewhere = mint_token(_dev(tmp_path / "default"), "alice", 60)
    data = str(tmp_path / "server data")
    assert _refusal(server, elsewhere) == (
        "token signature is invalid: it was signed with a key this server does not have; "
        f"mint it with this server's MEMSTRATA_DATA_DIR ({data}), e.g. "
        f"`MEMSTRATA_DATA_DIR={shlex.quote(data)} memstrata token --user <id>`, "
        "or give both the same MEMSTRATA_JWT_SECRET"
    )
    assert Authenticator.from_settings(server).user_id(mint_token(server, "alice", 60)) == "alice"


def test_an_expired_development_token_says_to_mint_a_new_one(tmp_path: Path) -> None:
    server = _dev(tmp_path)
    old = mint_token(server, "alice", 1, now=0)
    assert _refusal(server, old) == (
        "token expired: mint a new one (`memstrata token --user <id>`, with this "
        "server's MEMSTRATA_DATA_DIR)"
    )


@pytest.mark.parametrize("environment", ["production", "test", "development"])
def test_an_explicit_secret_reveals_nothing(tmp_path: Path, environment: str) -> None:
    """No data directory in a refusal, whatever the environment, once a secret is set: the
    data directory is not where the key comes from, and a public server says nothing."""
    server = Settings(environment=environment, data_dir=tmp_path, jwt_secret=SECRET)
    other = mint_token(Settings(data_dir=tmp_path, jwt_secret="another-" + SECRET), "a", 60)
    assert _refusal(server, other) == "token signature is invalid"
    assert _refusal(server, mint_token(server, "a", 1, now=0)) == "token expired"


def test_the_hint_reaches_an_http_client(mem: Memstrata, tmp_path: Path) -> None:
    server = _dev(tmp_path / "srv")
    elsewhere = mint_token(_dev(tmp_path / "other"), "alice", 60)
    with TestClient(create_app(server, memstrata=mem)) as client:
        answer = client.get("/api/config/skills", headers=bearer(elsewhere))
    assert answer.status_code == 401
    assert f"MEMSTRATA_DATA_DIR ({tmp_path / 'srv'})" in answer.json()["detail"]
    assert "error_description=" in answer.headers["www-authenticate"]
