"""Rotating the JWT secret or public key without a window of 401s (docs/DEPLOY.md).

Real tokens (PyJWT, and ``mint_token`` with its ``kid``) against the real app on the real
database, one app per step of the procedure: before, the new key added, the signer
switched, the old key removed. Before ``MEMSTRATA_JWT_ROTATION_*`` exactly one secret and
one public key were accepted, so every token of the other key was a 401 during a rollout.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.api.auth import Authenticator
from memstrata.api.token_keys import AuthConfigurationError, key_id, mint_token
from memstrata.config import Settings
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import bearer

URL = "/api/config/skills"
OLD = "old-secret-" + "o" * 40
NEW = "new-secret-" + "n" * 40


def _status(mem: Memstrata, settings: Settings, token: str) -> int:
    with TestClient(create_app(settings, memstrata=mem)) as client:
        return client.get(URL, headers=bearer(token)).status_code


def _claims() -> dict[str, Any]:
    return {"sub": "alice", "exp": int(time.time()) + 600}


def _pem(private_key: Any) -> str:
    pem: bytes = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode()


def test_rotating_the_secret_step_by_step_never_refuses_a_live_token(
    mem: Memstrata, settings: Settings
) -> None:
    """Each replica configuration of the procedure accepts every token the signer issued
    since the previous step: no 401 at any point of the rollout."""
    before = settings.model_copy(update={"jwt_secret": OLD})
    added = settings.model_copy(update={"jwt_secret": OLD, "jwt_rotation_secrets": [NEW]})
    switched = settings.model_copy(update={"jwt_secret": NEW, "jwt_rotation_secrets": [OLD]})
    removed = settings.model_copy(update={"jwt_secret": NEW})
    old_token = mint_token(before, "alice", 600)  # the signer before the switch
    new_token = mint_token(switched, "alice", 600)  # ... and after it (memstrata token too)
    assert jwt.get_unverified_header(new_token)["kid"] == key_id(NEW)

    assert _status(mem, before, old_token) == 200
    assert _status(mem, before, new_token) == 401  # why the new key is added first
    for step in (added, switched):  # replicas of either step run side by side
        assert _status(mem, step, old_token) == 200
        assert _status(mem, step, new_token) == 200
    assert _status(mem, removed, new_token) == 200
    assert _status(mem, removed, old_token) == 401  # after the longest token lifetime


def test_a_token_of_a_key_not_accepted_is_logged_as_foreign_with_every_accepted_kid(
    mem: Memstrata, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    accepting = settings.model_copy(update={"jwt_secret": OLD, "jwt_rotation_secrets": [NEW]})
    stranger = settings.model_copy(update={"jwt_secret": "third-secret-" + "t" * 40})
    with caplog.at_level(logging.WARNING, logger="memstrata.api.auth"):
        assert _status(mem, accepting, mint_token(stranger, "alice", 600)) == 401
    [line] = [event_fields(r) for r in caplog.records if r.getMessage().startswith("auth.")]
    assert line["event"] == "auth.token.foreign_key"
    assert line["expected"] == f"{key_id(OLD)},{key_id(NEW)}"


def test_the_kid_chooses_the_secret_and_a_token_without_one_is_tried_with_each(
    mem: Memstrata, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    accepting = settings.model_copy(update={"jwt_secret": OLD, "jwt_rotation_secrets": [NEW]})
    # An issuer that sets no kid (or its own): each secret in turn.
    assert _status(mem, accepting, jwt.encode(_claims(), NEW, algorithm="HS256")) == 200
    foreign_kid = jwt.encode(_claims(), NEW, algorithm="HS256", headers={"kid": "idp-7"})
    assert _status(mem, accepting, foreign_kid) == 200
    # A kid naming one of our secrets is checked with that one only: signed with the
    # other, it is a forgery (or a corruption), not a token of another key.
    mixed = jwt.encode(_claims(), OLD, algorithm="HS256", headers={"kid": key_id(NEW)})
    with caplog.at_level(logging.WARNING, logger="memstrata.api.auth"):
        assert _status(mem, accepting, mixed) == 401
    assert [m for r in caplog.records if (m := r.getMessage()).startswith("auth.")] == [
        "auth.token.forged"
    ]


def test_a_claim_failure_under_the_rotation_key_is_reported_as_such(
    mem: Memstrata, settings: Settings
) -> None:
    """The signature matched the second key: the answer is about the claims (expired),
    not a misleading "signature is invalid" from the first key."""
    accepting = settings.model_copy(update={"jwt_secret": OLD, "jwt_rotation_secrets": [NEW]})
    expired = jwt.encode({"sub": "alice", "exp": int(time.time()) - 3600}, NEW, "HS256")
    with TestClient(create_app(accepting, memstrata=mem)) as client:
        answer = client.get(URL, headers=bearer(expired))
    assert answer.status_code == 401
    assert answer.json()["detail"].startswith("token expired: get a new one from its issuer")


def test_an_identity_provider_rotating_its_public_key(mem: Memstrata, settings: Settings) -> None:
    """Another RSA key, then a move from RSA to EC: each rotation key verifies its own
    algorithms, and a key nobody configured is still refused."""
    current = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    following = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elliptic = ec.generate_private_key(ec.SECP256R1())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    accepting = settings.model_copy(
        update={
            "jwt_secret": None,
            "jwt_public_key": _pem(current),
            "jwt_rotation_public_keys": [_pem(following), _pem(elliptic)],
        }
    )
    assert Authenticator.from_settings(accepting).algorithms == ["ES256", "RS256"]
    for key, algorithm in ((current, "RS256"), (following, "RS256"), (elliptic, "ES256")):
        assert _status(mem, accepting, jwt.encode(_claims(), key, algorithm=algorithm)) == 200
    assert _status(mem, accepting, jwt.encode(_claims(), stranger, algorithm="RS256")) == 401
    only_current = accepting.model_copy(update={"jwt_rotation_public_keys": []})
    assert _status(mem, only_current, jwt.encode(_claims(), elliptic, algorithm="ES256")) == 401


def test_rotation_keys_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON lists, as every list setting; a PEM may be given as a path."""
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "next.pem"
    path.write_text(_pem(key))
    monkeypatch.setenv("MEMSTRATA_JWT_ROTATION_SECRETS", f'["{NEW}"]')
    monkeypatch.setenv("MEMSTRATA_JWT_ROTATION_PUBLIC_KEYS", f'["{path}"]')
    settings = Settings(environment="test", data_dir=tmp_path, jwt_secret=OLD)
    auth = Authenticator.from_settings(settings)
    assert auth.user_id(jwt.encode(_claims(), NEW, algorithm="HS256")) == "alice"
    assert auth.user_id(jwt.encode(_claims(), key, algorithm="ES256")) == "alice"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"jwt_secret": OLD, "jwt_rotation_public_keys": ["no such file"]},
            r"MEMSTRATA_JWT_ROTATION_PUBLIC_KEYS\[0\] must be a PEM public key",
        ),
        (  # an EC key while only RS256 is accepted would verify nothing: refused
            {
                "jwt_public_key": _pem(
                    rsa.generate_private_key(public_exponent=65537, key_size=2048)
                ),
                "jwt_algorithms": ["RS256"],
                "jwt_rotation_public_keys": [_pem(ec.generate_private_key(ec.SECP256R1()))],
            },
            r"ROTATION_PUBLIC_KEYS\[0\] verifies ES256/ES384/ES512, none of which",
        ),
        (
            {
                "jwt_public_key": _pem(ec.generate_private_key(ec.SECP256R1())),
                "jwt_algorithms": ["ES256"],
                "jwt_rotation_secrets": [NEW],
            },
            "MEMSTRATA_JWT_ROTATION_SECRETS is set, but",
        ),
        (
            {"environment": "production", "jwt_secret": OLD, "jwt_rotation_secrets": ["short"]},
            r"MEMSTRATA_JWT_ROTATION_SECRETS\[0\] must be at least 32 characters",
        ),
    ],
)
def test_rotation_keys_that_cannot_work_are_refused_at_start(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    base: dict[str, Any] = {"environment": "test", "data_dir": tmp_path}
    if values.get("environment") == "production":
        base["database_url"] = "embedded"
    with pytest.raises(AuthConfigurationError, match=message):
        Authenticator.from_settings(Settings(**{**base, **values}))


def test_an_empty_rotation_secret_is_refused(tmp_path: Path) -> None:
    """An empty HMAC key would accept tokens anyone can sign."""
    with pytest.raises(ValueError, match="must not contain an empty entry"):
        Settings(environment="test", data_dir=tmp_path, jwt_rotation_secrets=[OLD, " "])
