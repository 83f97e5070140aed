"""Bearer-token attacks over HTTP, key configuration, and the development secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memstrata.api.auth import AuthenticationError, Authenticator
from memstrata.api.token_keys import AuthConfigurationError, load_or_create_dev_secret, mint_token
from memstrata.config import Settings
from tests.api.auth import bearer
from tests.api.conftest import TokenFactory

URL = "/api/config/skills"
CHALLENGE = 'Bearer realm="memstrata"'
OPEN_PATHS = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/openapi.json",
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(signature)}"


def _claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "exp": int(time.time()) + 600, **extra}


def _assert_401(response: Any, detail: str, *, invalid_token: bool = True) -> None:
    assert response.status_code == 401, response.text
    assert response.json() == {"code": "unauthorized", "detail": detail, "message": detail}
    challenge = response.headers["www-authenticate"]
    if invalid_token:
        assert challenge.startswith(f'{CHALLENGE}, error="invalid_token", error_description="')
    else:
        assert challenge == CHALLENGE


def test_missing_header(client: TestClient) -> None:
    _assert_401(
        client.get(URL),
        "missing bearer token: send 'Authorization: Bearer <token>'",
        invalid_token=False,
    )


# Where a new token comes from, for these settings (an HS256 secret).
GET_NEW = (
    "get a new one from its issuer (`memstrata token --user <id>` signs one with the "
    "server's MEMSTRATA_JWT_SECRET)"
)
BAD_SIGNATURE = (
    "token signature is invalid: it was changed after signing, or signed with a key this "
    f"server does not have; send it exactly as issued, or {GET_NEW}"
)
MALFORMED = (
    "malformed token: not a JWT (three base64url parts joined by dots); send it as issued, "
    "without quotes"
)


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Basic YWxpY2U6cHc=", "unsupported authorization scheme 'Basic': use 'Bearer <token>'"),
        (
            "Bearer",
            "empty bearer token: send the token after the scheme, 'Authorization: Bearer <token>'",
        ),
        ("Bearer not-a-jwt", MALFORMED),
        ("Bearer a.b.c", MALFORMED),
        ('Bearer "eyJ.eyJ.sig"', MALFORMED),  # sent quoted
    ],
)
def test_malformed_headers(client: TestClient, header: str, detail: str) -> None:
    _assert_401(client.get(URL, headers={"Authorization": header}), detail)


def _get(client: TestClient, token: str) -> Any:
    return client.get(URL, headers=bearer(token))


def test_expired(client: TestClient, make_token: TokenFactory) -> None:
    _assert_401(_get(client, make_token(exp=int(time.time()) - 60)), f"token expired: {GET_NEW}")


def test_wrong_secret(client: TestClient, make_token: TokenFactory) -> None:
    token = make_token(key="another-secret-that-is-long-enough-012345")
    _assert_401(_get(client, token), BAD_SIGNATURE)


def test_tampered_payload(client: TestClient, make_token: TokenFactory) -> None:
    head, _, signature = make_token("alice").split(".")
    forged = f"{head}.{_b64(json.dumps(_claims(sub='bob')).encode())}.{signature}"
    _assert_401(_get(client, forged), BAD_SIGNATURE)


ONLY_HS256 = (
    "(accepted: HS256): get a token signed with one of those; the server's "
    "MEMSTRATA_JWT_ALGORITHMS lists them"
)


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none(client: TestClient, alg: str) -> None:
    token = _unsigned({"alg": alg, "typ": "JWT"}, _claims())
    _assert_401(_get(client, token), f"token algorithm {alg!r} is not accepted {ONLY_HS256}")


def test_algorithm_outside_the_allowed_list(client: TestClient, make_token: TokenFactory) -> None:
    # Right secret, but HS512 is not in MEMSTRATA_JWT_ALGORITHMS.
    token = make_token(algorithm="HS512")
    _assert_401(_get(client, token), f"token algorithm 'HS512' is not accepted {ONLY_HS256}")


NUMBER_FIX = "(seconds since 1970-01-01 UTC): get a token whose times are numbers from its issuer"
NO_AUDIENCE = (
    "token audience is not accepted: this server takes tokens without 'aud' "
    "(MEMSTRATA_JWT_AUDIENCE names the one it should accept)"
)


@pytest.mark.parametrize(
    ("claims", "detail"),
    [
        ({"exp": None}, "token has no 'exp' claim: get a token that has one from its issuer"),
        (
            {"sub": None},
            "token has no 'sub' claim (the user id, a string): get a token that has one from "
            "its issuer, or set the server's MEMSTRATA_JWT_USER_CLAIM to the claim that holds "
            "the user id",
        ),
        (
            {"nbf": int(time.time()) + 3600},
            "token is not valid yet (nbf/iat in the future): wait until its 'nbf', or set the "
            "issuer's clock right (this server allows 30 s of clock skew: "
            "MEMSTRATA_JWT_LEEWAY_S)",
        ),
        ({"aud": "someone-else"}, NO_AUDIENCE),
        # PyJWT checks only a non-empty audience; the docs say any 'aud' is refused.
        ({"aud": []}, NO_AUDIENCE),
        ({"aud": ""}, NO_AUDIENCE),
        (
            # Far ahead: the value is taken when the tests are collected, and a run can reach
            # this test minutes later (then PyJWT's own expiry check answered first).
            {"exp": str(int(time.time()) + 86_400)},
            "token's 'exp' claim must be a number " + NUMBER_FIX,
        ),
        ({"iat": "0"}, "token's 'iat' claim must be a number " + NUMBER_FIX),
        ({"nbf": True}, "token's 'nbf' claim must be a number " + NUMBER_FIX),
    ],
)
def test_bad_claims(
    client: TestClient, make_token: TokenFactory, claims: dict[str, Any], detail: str
) -> None:
    _assert_401(_get(client, make_token(**claims)), detail)


def test_user_id_too_long(client: TestClient, make_token: TokenFactory) -> None:
    _assert_401(
        _get(client, make_token("x" * 101)),
        "token's 'sub' claim: user_id is longer than 100 characters; get a token for a valid "
        "user id from its issuer",
    )
    assert _get(client, make_token("x" * 100)).status_code == 200


def test_non_string_subject(client: TestClient, settings: Settings) -> None:
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps({"sub": 42, "exp": int(time.time()) + 60}).encode())
    assert settings.jwt_secret is not None
    signature = hmac.new(
        settings.jwt_secret.encode(), f"{head}.{body}".encode(), hashlib.sha256
    ).digest()
    response = _get(client, f"{head}.{body}.{_b64(signature)}")
    # PyJWT's own words were "invalid token: Subject must be a string".
    _assert_401(
        response,
        "token's 'sub' claim must be a string (the user id): get a token whose 'sub' is one "
        "from its issuer",
    )


def test_every_api_route_requires_a_token(app: FastAPI, client: TestClient) -> None:
    # From the OpenAPI document, so a route added later cannot skip this test.
    paths = app.openapi()["paths"]
    protected = [
        (method.upper(), path)
        for path, operations in paths.items()
        if path not in OPEN_PATHS
        for method, operation in operations.items()
        if operation.get("security") == [{"bearer": []}]
    ]
    assert sum(len(ops) for path, ops in paths.items() if path not in OPEN_PATHS) == len(protected)
    assert sorted(protected) == [
        ("DELETE", "/api/memory/conflicts/{name}"),
        ("GET", "/api/config/agent-files/{name}"),
        ("GET", "/api/config/limits"),
        ("GET", "/api/config/skills"),
        ("GET", "/api/memory/conflicts"),
        ("GET", "/api/memory/conflicts/{name}"),
        ("POST", "/api/memory/conversations/turns:batch"),
        ("POST", "/api/memory/conversations/{session_id}/turns"),
        ("POST", "/api/memory/search"),
        ("PUT", "/api/config/agent-files/{name}"),
        ("PUT", "/api/config/skills/{skill_name}"),
    ]
    for method, path in protected:
        concrete = path.replace("{name}", "user").replace("{skill_name}", "web_search")
        concrete = concrete.replace("{session_id}", "s1")
        response = client.request(method, concrete, json={})
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == CHALLENGE


def test_open_paths_need_no_token(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 200


# -- key configuration ---------------------------------------------------------------------


def _pem(public_key: Any) -> str:
    pem: bytes = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode()


def _settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(environment="test", data_dir=tmp_path / "data", **values)


@pytest.mark.parametrize(
    ("private_key", "algorithm"),
    [
        (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
        (ec.generate_private_key(ec.SECP256R1()), "ES256"),
    ],
)
def test_public_key_algorithms(tmp_path: Path, private_key: Any, algorithm: str) -> None:
    pem = _pem(private_key.public_key())
    auth = Authenticator.from_settings(_settings(tmp_path, jwt_public_key=pem))
    assert auth.algorithms == [algorithm]  # the key's own algorithm, not the HS256 default
    token = jwt.encode(_claims(), private_key, algorithm=algorithm)
    assert auth.authenticate(f"Bearer {token}") == "alice"
    assert not (tmp_path / "data" / "jwt_secret").exists()  # no dev secret beside a key

    # Algorithm confusion: an HS256 token "signed" with the public key as HMAC secret.
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps(_claims()).encode())
    mac = hmac.new(pem.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    with pytest.raises(AuthenticationError, match="'HS256' is not accepted"):
        auth.authenticate(f"Bearer {head}.{body}.{_b64(mac)}")


def test_public_key_from_a_file_and_escaped_newlines(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = _pem(key.public_key())
    path = tmp_path / "key.pem"
    path.write_text(pem)
    token = jwt.encode(_claims(), key, algorithm="ES256")
    for value in (str(path), pem.replace("\n", "\\n")):
        auth = Authenticator.from_settings(_settings(tmp_path, jwt_public_key=value))
        assert auth.authenticate(f"Bearer {token}") == "alice"


def test_secret_and_public_key_each_verify_their_own_algorithm(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    secret = "s" * 40
    settings = _settings(tmp_path, jwt_public_key=_pem(key.public_key()), jwt_secret=secret)
    auth = Authenticator.from_settings(settings)
    assert auth.algorithms == ["HS256", "RS256"]
    assert auth.user_id(jwt.encode(_claims(), key, algorithm="RS256")) == "alice"
    assert auth.user_id(jwt.encode(_claims(), secret, algorithm="HS256")) == "alice"


def test_audience_and_user_claim(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path, jwt_secret="s" * 40, jwt_audience="memstrata", jwt_user_claim="uid"
    )
    auth = Authenticator.from_settings(settings)
    good = jwt.encode(_claims(uid="u-7", aud="memstrata"), "s" * 40, algorithm="HS256")
    assert auth.user_id(good) == "u-7"
    with pytest.raises(AuthenticationError, match="token has no 'aud' claim"):
        auth.user_id(jwt.encode(_claims(uid="u-7"), "s" * 40, algorithm="HS256"))
    with pytest.raises(AuthenticationError, match=r"token has no 'uid' claim \(the user id"):
        auth.user_id(jwt.encode(_claims(aud="memstrata"), "s" * 40, algorithm="HS256"))
    # mint_token follows the same settings.
    assert auth.user_id(mint_token(settings, "u-8", 60)) == "u-8"


def test_issuer(tmp_path: Path) -> None:
    """An identity provider signing for several services with one key: the issuer tells
    whose token it is (there was no way to require one)."""
    secret = "s" * 40
    settings = _settings(tmp_path, jwt_secret=secret, jwt_issuer="https://id.example/")
    auth = Authenticator.from_settings(settings)
    good = jwt.encode(_claims(iss="https://id.example/"), secret, algorithm="HS256")
    assert auth.user_id(good) == "alice"
    with pytest.raises(AuthenticationError, match="token has no 'iss' claim"):
        auth.user_id(jwt.encode(_claims(), secret, algorithm="HS256"))
    other = jwt.encode(_claims(iss="https://other.example/"), secret, algorithm="HS256")
    with pytest.raises(AuthenticationError, match=r"issuer is not accepted.*id\.example"):
        auth.user_id(other)
    assert auth.user_id(mint_token(settings, "u-9", 60)) == "u-9"
    # Unset, any issuer (or none) is taken, as before.
    assert Authenticator.from_settings(_settings(tmp_path, jwt_secret=secret)).user_id(other)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"jwt_public_key": "not a key"}, "must be a PEM public key or the path to one"),
        (
            {"jwt_public_key": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"},
            "is not a PEM public key",
        ),
        (
            {"jwt_public_key": _pem(ed25519.Ed25519PrivateKey.generate().public_key())},
            "use an RSA or EC key",
        ),
        ({"jwt_secret": "s" * 40, "jwt_algorithms": ["HS256", "XS1"]}, "unsupported entries"),
        ({"jwt_secret": "s" * 40, "jwt_algorithms": ["RS256"]}, "no key can verify"),
        ({}, r"MEMSTRATA_ENVIRONMENT=test needs MEMSTRATA_JWT_SECRET or MEMSTRATA_JWT_PUBLIC_KEY"),
    ],
)
def test_unusable_configuration(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    with pytest.raises(AuthConfigurationError, match=message):
        Authenticator.from_settings(_settings(tmp_path, **values))


# -- development secret --------------------------------------------------------------------


def test_dev_secret_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    settings = Settings(environment="development", data_dir=tmp_path / "d", jwt_secret=None)
    auth = Authenticator.from_settings(settings)
    path = tmp_path / "d" / "jwt_secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().strip()
    assert len(secret) >= 32
    assert load_or_create_dev_secret(tmp_path / "d") == secret
    assert Authenticator.from_settings(settings).keys == {"HS256": (secret,)}
    token = mint_token(settings, "alice", 60)
    assert auth.user_id(token) == "alice"
    assert [p.name for p in path.parent.iterdir()] == ["jwt_secret"]  # no temp files left


def test_empty_dev_secret_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "jwt_secret").write_text("\n")
    (tmp_path / "jwt_secret").chmod(0o600)
    with pytest.raises(AuthConfigurationError, match="delete it to generate a new secret"):
        load_or_create_dev_secret(tmp_path)


def test_a_dev_secret_others_can_read_write_or_own_is_refused(tmp_path: Path) -> None:
    """A secret planted in a shared data directory, or one others can read, lets them
    sign tokens for any user: it was trusted as long as it was not empty."""
    path = tmp_path / "jwt_secret"
    path.write_text("attacker-known-secret-0123456789abcdef\n")
    for mode in (0o644, 0o620, 0o604):
        path.chmod(mode)
        with pytest.raises(AuthConfigurationError, match=f"not private .*mode {mode:o}"):
            load_or_create_dev_secret(tmp_path)
    path.chmod(0o600)
    assert load_or_create_dev_secret(tmp_path) == "attacker-known-secret-0123456789abcdef"
    if os.geteuid() == 0:  # CI and these machines: another owner can be set
        os.chown(path, 65534, -1)
        with pytest.raises(AuthConfigurationError, match="owner uid 65534"):
            load_or_create_dev_secret(tmp_path)


def test_mint_token_refuses_without_a_secret(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    settings = _settings(tmp_path, jwt_public_key=_pem(key.public_key()))
    with pytest.raises(AuthConfigurationError, match="identity provider"):
        mint_token(settings, "alice", 60)
    with pytest.raises(ValueError, match="ttl must be at least 1 second"):
        mint_token(_settings(tmp_path, jwt_secret="s" * 40), "alice", 0)


def test_mint_token_names_an_unsupported_algorithm_as_serve_does(tmp_path: Path) -> None:
    """``memstrata token`` said "has no HS256/HS384/HS512 entry … get tokens from the
    identity provider" for a typo, where serve named the entry."""
    settings = _settings(tmp_path, jwt_secret="s" * 40, jwt_algorithms=["XX1"])
    unsupported = r"MEMSTRATA_JWT_ALGORITHMS has unsupported entries \['XX1'\]; choose from HS256"
    with pytest.raises(AuthConfigurationError, match=unsupported):
        mint_token(settings, "alice", 60)
    with pytest.raises(AuthConfigurationError, match=unsupported):
        Authenticator.from_settings(settings)


def test_a_user_claim_that_is_no_string_says_so(tmp_path: Path) -> None:
    settings = _settings(tmp_path, jwt_secret="s" * 40, jwt_user_claim="uid")
    auth = Authenticator.from_settings(settings)
    with pytest.raises(AuthenticationError, match=r"^token's 'uid' claim must be a string \(the"):
        auth.user_id(jwt.encode(_claims(uid=7), "s" * 40, algorithm="HS256"))
    # PyJWT checks 'sub' whatever claim holds the user id.
    with pytest.raises(
        AuthenticationError,
        match=r"^token's 'sub' claim must be a string: get a token whose 'sub' is",
    ):
        auth.user_id(jwt.encode(_claims(uid="u-1", sub=7), "s" * 40, algorithm="HS256"))


def test_umask_does_not_matter(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        load_or_create_dev_secret(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "jwt_secret").stat().st_mode) == 0o600
