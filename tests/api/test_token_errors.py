"""Every token refusal says what to do — send the token as issued, get a new one (and
from where), or which ``MEMSTRATA_JWT_*`` setting decides — in the same words over REST
and ``/mcp`` (the web page's sign-in shows that ``detail`` as it is). Before, a bad
signature said only "token signature is invalid", and an expired token only "token
expired" unless the server ran on the development secret.

Also the expired-token grace (``expired_grace_s``), which lets an MCP client end its own
session with the token that ran out: it takes a token refused only for its age, within
the grace, and nothing else (tests/mcp/test_expired_session_end.py drives it over HTTP).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.api.auth import AuthenticationError, Authenticator
from memstrata.api.token_keys import mint_token
from memstrata.api.token_refusals import ExpiredTokenError
from memstrata.config import Settings
from memstrata.runtime import Memstrata

SECRET = "explicit-secret-that-is-long-enough-0123456789"
FROM_SECRET = (
    "get a new one from its issuer (`memstrata token --user <id>` signs one with the "
    "server's MEMSTRATA_JWT_SECRET)"
)
FROM_PROVIDER = (
    "get a new one from its issuer (the identity provider whose public key is the server's "
    "MEMSTRATA_JWT_PUBLIC_KEY)"
)
# What each refusal tells its reader to do: it must say at least one of these.
ACTIONS = ("send ", "get a ", "get one", "mint ", "set ", "use ", "wait ", "ask ", "names the")


def _claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {k: v for k, v in {"sub": "alice", "exp": now + 600, **extra}.items() if v is not None}


def _signed(claims: dict[str, Any], key: str = SECRET, **headers: Any) -> str:
    return jwt.encode(claims, key, "HS256", headers=headers or None)


def _unsigned_header(alg: str) -> str:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': alg, 'typ': 'JWT'})}.{b64(_claims())}."


def _server(tmp_path: Path, **values: Any) -> Settings:
    return Settings(environment="test", data_dir=tmp_path / "data", jwt_secret=SECRET, **values)


def _refusal(auth: Authenticator, token: str, **options: Any) -> str:
    with pytest.raises(AuthenticationError) as refused:
        auth.authenticate(f"Bearer {token}", **options)
    return str(refused.value.detail)


def test_a_bad_signature_and_an_expired_token_say_where_to_get_a_new_one(
    tmp_path: Path,
) -> None:
    settings = _server(tmp_path)
    auth = Authenticator.from_settings(settings)
    expired = mint_token(settings, "alice", 60, now=time.time() - 3600)
    assert _refusal(auth, expired) == f"token expired: {FROM_SECRET}"
    # no key id, or a forged payload: nothing tells whose key it was
    for token in (_signed(_claims(), "another-" + SECRET), _signed(_claims()) + "x"):
        assert _refusal(auth, token) == (
            "token signature is invalid: it was changed after signing, or signed with a key "
            f"this server does not have; send it exactly as issued, or {FROM_SECRET}"
        )
    # minted by `memstrata token` for another server: its key id is none of ours
    foreign = mint_token(Settings(environment="test", jwt_secret="another-" + SECRET), "a", 60)
    assert _refusal(auth, foreign) == (
        "token signature is invalid: it was signed with a key this server does not have; "
        f"{FROM_SECRET}, or have the server accept that key (during a key rotation: "
        "MEMSTRATA_JWT_ROTATION_SECRETS)"
    )


def test_with_only_a_public_key_a_new_token_comes_from_the_identity_provider(
    tmp_path: Path,
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    settings = Settings(environment="test", data_dir=tmp_path, jwt_public_key=pem.decode())
    auth = Authenticator.from_settings(settings)
    expired = jwt.encode(_claims(exp=int(time.time()) - 3600), key, "RS256")
    assert _refusal(auth, expired) == f"token expired: {FROM_PROVIDER}"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert _refusal(auth, jwt.encode(_claims(), other, "RS256")).endswith(
        f"send it exactly as issued, or {FROM_PROVIDER}"
    )


def _every_refusal(now: int) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """Authorization header values, each refused, and the settings refusing it."""
    audience = {"jwt_audience": "memstrata"}
    issuer = {"jwt_issuer": "https://id.example/"}
    return {
        "missing": (None, {}),
        "another scheme": ("Basic YWxpY2U6cHc=", {}),
        "empty": ("Bearer ", {}),
        "malformed": ("Bearer not-a-jwt", {}),
        "alg none": (f"Bearer {_unsigned_header('none')}", {}),
        "expired": (f"Bearer {_signed(_claims(exp=now - 3600))}", {}),
        "bad signature": (f"Bearer {_signed(_claims(), 'another-' + SECRET)}", {}),
        "no exp": (f"Bearer {_signed(_claims(exp=None))}", {}),
        "no sub": (f"Bearer {_signed(_claims(sub=None))}", {}),
        "sub not a string": (f"Bearer {_signed(_claims(sub=42))}", {}),
        "bad user id": (f"Bearer {_signed(_claims(sub='x' * 101))}", {}),
        "not valid yet": (f"Bearer {_signed(_claims(nbf=now + 3600))}", {}),
        "time not a number": (f"Bearer {_signed(_claims(iat='0'))}", {}),
        "aud unasked": (f"Bearer {_signed(_claims(aud='x'))}", {}),
        "no aud": (f"Bearer {_signed(_claims())}", audience),
        "wrong aud": (f"Bearer {_signed(_claims(aud='x'))}", audience),
        "no iss": (f"Bearer {_signed(_claims())}", issuer),
        "wrong iss": (f"Bearer {_signed(_claims(iss='https://x.example/'))}", issuer),
        "lives too long": (
            f"Bearer {_signed(_claims(exp=now + 10**6))}",
            {"jwt_max_lifetime_s": 60},
        ),
    }


def test_every_refusal_says_what_to_do_the_same_over_rest_and_mcp(
    tmp_path: Path, mem: Memstrata
) -> None:
    for case, (header, values) in _every_refusal(int(time.time())).items():
        settings = _server(tmp_path, **values)
        headers = {} if header is None else {"Authorization": header}
        with TestClient(create_app(settings, memstrata=mem)) as http:
            rest = http.get("/api/config/skills", headers=headers)
            mcp = http.post("/mcp", headers=headers, json={})
        assert rest.status_code == mcp.status_code == 401, (case, rest.text, mcp.text)
        detail = rest.json()["detail"]
        assert mcp.json()["detail"] == mcp.json()["error"]["message"] == detail, case
        assert mcp.headers["www-authenticate"] == rest.headers["www-authenticate"], case
        advice = detail.partition(": ")[2]
        assert any(action in advice for action in ACTIONS), (case, detail)


# -- the grace for ending one's own MCP session ---------------------------------------------


def test_the_grace_takes_a_token_refused_only_for_its_age(tmp_path: Path) -> None:
    auth = Authenticator.from_settings(_server(tmp_path))
    now = int(time.time())
    recent = _signed(_claims(exp=now - 600))  # 570 s past the 30 s leeway
    with pytest.raises(ExpiredTokenError):
        auth.authenticate(f"Bearer {recent}")
    assert auth.authenticate(f"Bearer {recent}", expired_grace_s=600) == "alice"
    assert auth.authenticate(f"Bearer {_signed(_claims())}", expired_grace_s=600) == "alice"
    old = _signed(_claims(exp=now - 700))  # 670 s past the leeway
    with pytest.raises(ExpiredTokenError, match=r"^token expired: get a new one"):
        auth.authenticate(f"Bearer {old}", expired_grace_s=600)
    # PyJWT's own reader takes NaN, which compares false to every time
    nan = _signed(_claims(exp=float("nan")))
    assert "must be a number" in _refusal(auth, nan, expired_grace_s=600)


def test_the_grace_checks_everything_else(tmp_path: Path) -> None:
    exp = int(time.time()) - 600
    strict = Authenticator.from_settings(
        _server(tmp_path, jwt_audience="memstrata", jwt_issuer="https://id.example/")
    )
    right = {"aud": "memstrata", "iss": "https://id.example/", "exp": exp}
    assert strict.user_id(_signed(_claims(**right)), expired_grace_s=900) == "alice"
    refused = {
        # PyJWT stops at an expired 'exp' before it looks at 'aud' and 'iss'
        "token audience is not accepted": _signed(_claims(**{**right, "aud": "other"})),
        "token issuer is not accepted": _signed(_claims(**{**right, "iss": "https://x/"})),
        "token has no 'aud' claim": _signed(_claims(**{**right, "aud": None})),
        "token signature is invalid": _signed(_claims(**right), "another-" + SECRET),
        "token algorithm 'none' is not accepted": _unsigned_header("none"),
        # the grace does not widen the leeway on the other times
        "token is not valid yet": _signed(_claims(**right, nbf=int(time.time()) + 300)),
    }
    for said, token in refused.items():
        with pytest.raises(AuthenticationError) as raised:
            strict.user_id(token, expired_grace_s=900)
        assert not isinstance(raised.value, ExpiredTokenError), said
        assert str(raised.value.detail).startswith(said), (said, raised.value.detail)
