"""A 401 on the development secret says how to get a token this server takes — to a caller
on this machine (loopback) only: the data directory's path is nobody else's business. With
an explicit key (production) it says nothing of the server's set-up to anyone."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.api.auth import AuthenticationError, Authenticator, calling_from, is_loopback
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.api.auth import bearer

SECRET = "explicit-secret-that-is-long-enough-0123456789"


def _dev(data_dir: Path) -> Settings:
    return Settings(environment="development", data_dir=data_dir)


def _refusal(settings: Settings, token: str, caller: str | None = "127.0.0.1") -> str:
    with pytest.raises(AuthenticationError) as refused, calling_from(caller):
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
    get_new = (
        "get a new one from its issuer (`memstrata token --user <id>` signs one with the "
        "server's MEMSTRATA_JWT_SECRET)"
    )
    assert _refusal(server, other) == (
        "token signature is invalid: it was signed with a key this server does not have; "
        f"{get_new}, or have the server accept that key (during a key rotation: "
        "MEMSTRATA_JWT_ROTATION_SECRETS)"
    )
    assert _refusal(server, mint_token(server, "a", 1, now=0)) == f"token expired: {get_new}"


# A token of another development secret, told to a caller not on this machine: how to get
# one, without the data directory.
ELSEWHERE = (
    "token signature is invalid: it was signed with a key this server does not have; mint a "
    "new one (`memstrata token --user <id>`, with this server's MEMSTRATA_DATA_DIR), or have "
    "the server accept that key (during a key rotation: MEMSTRATA_JWT_ROTATION_SECRETS)"
)


@pytest.mark.parametrize("caller", ["192.168.1.20", "2001:db8::5", "testclient", None])
def test_a_caller_elsewhere_is_not_told_the_data_directory(tmp_path: Path, caller: str) -> None:
    server = _dev(tmp_path / "server data")
    elsewhere = mint_token(_dev(tmp_path / "default"), "alice", 60)
    assert _refusal(server, elsewhere, caller) == ELSEWHERE


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),  # an IPv4 client of a dual-stack socket
        ("::ffff:10.0.0.1", False),
        ("10.0.0.1", False),
        ("0.0.0.0", False),
        ("::", False),
        ("localhost", False),  # the ASGI client is an address; a name is a client's claim
        ("testclient", False),
        ("", False),
    ],
)
def test_which_callers_are_on_this_machine(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("client", "hinted"),
    [(("127.0.0.1", 50000), True), (("::1", 50000), True), (("203.0.113.7", 50000), False)],
)
def test_the_hint_reaches_a_local_http_client_only(
    mem: Memstrata, tmp_path: Path, client: tuple[str, int], hinted: bool
) -> None:
    server = _dev(tmp_path / "srv")
    elsewhere = mint_token(_dev(tmp_path / "other"), "alice", 60)
    with TestClient(create_app(server, memstrata=mem), client=client) as http:
        answer = http.get("/api/config/skills", headers=bearer(elsewhere))
        mcp = http.post("/mcp", headers=bearer(elsewhere), json={})
    data_dir = str(tmp_path / "srv")
    for refusal in (answer, mcp):
        assert refusal.status_code == 401
        said = refusal.json()["detail"] + refusal.headers["www-authenticate"]
        assert (data_dir in said) is hinted, said
        assert "error_description=" in refusal.headers["www-authenticate"]
    if not hinted:
        assert answer.json()["detail"] == ELSEWHERE
