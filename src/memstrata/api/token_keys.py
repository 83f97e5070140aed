"""Which keys verify and sign bearer tokens: the JWT settings turned into each accepted
algorithm's keys (:func:`verification_keys`, for
:class:`~memstrata.api.auth.Authenticator`), their checks, the development secret, and
development tokens (:func:`mint_token`).

Key rotation: ``MEMSTRATA_JWT_ROTATION_SECRETS`` and ``MEMSTRATA_JWT_ROTATION_PUBLIC_KEYS``
are accepted beside the configured secret and public key (the next key before the signer
switches to it, the previous one until its last token has expired; docs/DEPLOY.md). A
token whose ``kid`` names one of the secrets is checked with that one; any other token is
tried with each key of its algorithm in turn. Rotation keys keep each algorithm bound to
one kind of key (:mod:`memstrata.api.auth`): a secret only ever verifies HS*, an RSA key
RS*/PS*, an EC key ES*.

In development (``MEMSTRATA_ENVIRONMENT=development``, the default), with neither a secret
nor a public key configured, a random secret is generated once and kept in
``<data_dir>/jwt_secret`` (mode 0600); ``memstrata token`` signs development tokens with
it; a token signed with another key is refused with the data directory to mint one with,
told only to a caller on this machine (loopback;
:data:`memstrata.api.auth.CALLER_HOST`). Any other environment refuses to verify or sign
tokens without one, and production refuses a secret shorter than 32 characters
(:func:`require_token_keys`). These are checked here, where tokens are verified
(``create_app``, ``memstrata serve``) or signed (``memstrata token``), not in ``Settings``:
``memstrata db``, ``memstrata mcp`` over stdio and the library authenticate nobody and run
without them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from memstrata.config import Settings
from memstrata.errors import MemstrataError
from memstrata.logs import log_event
from memstrata.memory.kinds import validate_user_id

logger = logging.getLogger(__name__)

DEV_SECRET_FILE = "jwt_secret"
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")
SUPPORTED_ALGORITHMS = HMAC_ALGORITHMS + RSA_ALGORITHMS + EC_ALGORITHMS
MIN_PRODUCTION_SECRET_CHARS = 32


class AuthConfigurationError(MemstrataError, ValueError):
    """The JWT settings cannot verify any token (bad key, no usable algorithm)."""


def key_id(key: Any) -> str | None:
    """A public identifier of an HMAC secret (a hash prefix; reveals nothing of it)."""
    if not isinstance(key, str):
        return None
    return hashlib.sha256(b"memstrata-kid:" + key.encode("utf-8")).hexdigest()[:16]


def mint_token(
    settings: Settings, user_id: str, ttl_seconds: int, *, now: float | None = None
) -> str:
    """An HMAC-signed token for ``user_id`` (development / tests; production tokens come
    from the platform's identity provider)."""
    validate_user_id(user_id)
    if ttl_seconds < 1:
        raise ValueError("ttl must be at least 1 second")
    require_token_keys(settings)
    # As serve checks them (verification_keys): an unsupported entry is named before anything else.
    wanted = _supported_algorithms(settings)
    algorithm = next((a for a in wanted if a in HMAC_ALGORITHMS), None)
    if algorithm is None:
        raise AuthConfigurationError(
            "MEMSTRATA_JWT_ALGORITHMS has no HS256/HS384/HS512 entry, so memstrata cannot "
            "sign tokens; get tokens from the identity provider that owns the private key"
        )
    secret = settings.jwt_secret or _dev_secret_or_none(settings)
    if secret is None:
        raise AuthConfigurationError(
            "no MEMSTRATA_JWT_SECRET is configured; tokens for the configured public key "
            "are issued by the identity provider that owns the private key"
        )
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {
        settings.jwt_user_claim: user_id,
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    if settings.jwt_issuer:
        claims["iss"] = settings.jwt_issuer
    return jwt.encode(claims, secret, algorithm=algorithm, headers={"kid": key_id(secret)})


def load_or_create_dev_secret(data_dir: Path) -> str:
    """The development secret in ``<data_dir>/jwt_secret``, created (0600) on first use."""
    path = data_dir / DEV_SECRET_FILE
    try:
        _check_private(path)
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        try:
            return _create_dev_secret(path)
        except OSError as exc:
            raise _unusable(path, exc) from exc
    except OSError as exc:
        raise _unusable(path, exc) from exc
    if not text:
        raise AuthConfigurationError(
            f"{path} is empty; delete it to generate a new secret, or set MEMSTRATA_JWT_SECRET"
        )
    return text


def _check_private(path: Path) -> None:
    """Anyone who can write the secret (or plant it first in a shared data directory) can
    sign tokens for every user, and anyone who can read it can too: it must be this
    account's own file, closed to others, as it is created."""
    info = path.stat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise AuthConfigurationError(
            f"the development secret {path} is not private (owner uid {info.st_uid}, mode "
            f"{stat.S_IMODE(info.st_mode):o}): others could sign tokens for any user. Delete "
            "it to generate a new one (tokens signed with it stop working), or set "
            "MEMSTRATA_JWT_SECRET"
        )


def _unusable(path: Path, exc: OSError) -> AuthConfigurationError:
    return AuthConfigurationError(
        f"cannot read or create the development secret {path} ({exc.strerror or exc}): set "
        "MEMSTRATA_DATA_DIR to a directory this user can write, or MEMSTRATA_JWT_SECRET"
    )


def _create_dev_secret(path: Path) -> str:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new one: private
    secret = secrets.token_urlsafe(48)
    # Write a private temp file, then link it into place: readers never see a partial
    # file, and of two processes racing here exactly one wins (link fails if it exists).
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(secret + "\n")
        try:
            os.link(temp, path)
        except FileExistsError:
            return load_or_create_dev_secret(path.parent)
    finally:
        temp.unlink(missing_ok=True)
    log_event(logger, "auth.dev_secret.created", path=str(path))
    return secret


def uses_dev_secret(settings: Settings) -> bool:
    """Whether ``settings`` sign and verify tokens with the development secret in
    ``<data_dir>/jwt_secret``: development, with neither a secret nor a public key."""
    return (
        settings.environment == "development"
        and not settings.jwt_secret
        and not settings.jwt_public_key
    )


def _dev_secret_or_none(settings: Settings) -> str | None:
    return load_or_create_dev_secret(settings.data_dir) if uses_dev_secret(settings) else None


def require_token_keys(settings: Settings) -> None:
    """``AuthConfigurationError`` unless the JWT settings are fit to verify or sign tokens
    in ``settings.environment``: outside development a secret or a public key (only
    development generates a local secret), and in production a secret, if any, of at least
    32 characters."""
    if settings.environment != "development" and not (
        settings.jwt_secret or settings.jwt_public_key
    ):
        raise AuthConfigurationError(
            f"MEMSTRATA_ENVIRONMENT={settings.environment} needs MEMSTRATA_JWT_SECRET or "
            "MEMSTRATA_JWT_PUBLIC_KEY (only development generates a local secret)"
        )
    if settings.environment != "production":
        return
    named = [("MEMSTRATA_JWT_SECRET", settings.jwt_secret)] + [
        (f"MEMSTRATA_JWT_ROTATION_SECRETS[{n}]", s)
        for n, s in enumerate(settings.jwt_rotation_secrets)
    ]
    short = next((name for name, s in named if s and len(s) < MIN_PRODUCTION_SECRET_CHARS), None)
    if short is not None:
        raise AuthConfigurationError(
            f"{short} must be at least {MIN_PRODUCTION_SECRET_CHARS} characters in production"
        )


def _supported_algorithms(settings: Settings) -> list[str]:
    """``MEMSTRATA_JWT_ALGORITHMS`` without repeats, each one memstrata supports, else an
    ``AuthConfigurationError`` naming those it does not."""
    wanted = list(dict.fromkeys(settings.jwt_algorithms))
    unknown = [a for a in wanted if a not in SUPPORTED_ALGORITHMS]
    if unknown:
        raise AuthConfigurationError(
            f"MEMSTRATA_JWT_ALGORITHMS has unsupported entries {unknown}; "
            f"choose from {', '.join(SUPPORTED_ALGORITHMS)}"
        )
    return wanted


def verification_keys(settings: Settings) -> dict[str, tuple[Any, ...]]:
    """Each accepted algorithm's keys, the configured one first, then the rotation's;
    ``AuthConfigurationError`` for settings that cannot verify a token."""
    require_token_keys(settings)
    wanted = _supported_algorithms(settings)
    keys: dict[str, list[Any]] = {}

    def accept(algorithms: list[str], key: Any) -> None:
        for algorithm in algorithms:
            keys.setdefault(algorithm, []).append(key)

    if settings.jwt_public_key:
        public_key, family = _load_public_key(settings.jwt_public_key)
        accept(_key_algorithms(wanted, family), public_key)
    for n, value in enumerate(settings.jwt_rotation_public_keys):
        name = f"MEMSTRATA_JWT_ROTATION_PUBLIC_KEYS[{n}]"
        public_key, family = _load_public_key(value, name)
        algorithms = _key_algorithms(wanted, family)
        if not algorithms:  # it would verify nothing, and the rotation would fail
            raise AuthConfigurationError(
                f"{name} verifies {'/'.join(family)}, none of which "
                f"MEMSTRATA_JWT_ALGORITHMS={wanted} accepts: add the algorithm its tokens use"
            )
        accept(algorithms, public_key)
    hmac = [a for a in wanted if a in HMAC_ALGORITHMS]
    if settings.jwt_rotation_secrets and not hmac:
        raise AuthConfigurationError(
            f"MEMSTRATA_JWT_ROTATION_SECRETS is set, but MEMSTRATA_JWT_ALGORITHMS={wanted} "
            "accepts no HS256/HS384/HS512 token: add the algorithm its tokens use"
        )
    secret = settings.jwt_secret or _dev_secret_or_none(settings)
    for each in dict.fromkeys([*([secret] if secret else []), *settings.jwt_rotation_secrets]):
        accept(hmac, each)
    if not keys:
        raise AuthConfigurationError(
            f"no key can verify MEMSTRATA_JWT_ALGORITHMS={wanted}: HS* needs "
            "MEMSTRATA_JWT_SECRET, RS*/PS* an RSA and ES* an EC MEMSTRATA_JWT_PUBLIC_KEY"
        )
    return {algorithm: tuple(each) for algorithm, each in keys.items()}


def _key_algorithms(wanted: list[str], family: tuple[str, ...]) -> list[str]:
    """The accepted algorithms a public key of ``family`` verifies; with only HS* listed
    (the default), the key's natural one: RS256 or ES256."""
    mine = [a for a in wanted if a in family]
    if not mine and all(a in HMAC_ALGORITHMS for a in wanted):
        mine = [family[0]]
    return mine


def _load_public_key(
    value: str, name: str = "MEMSTRATA_JWT_PUBLIC_KEY"
) -> tuple[Any, tuple[str, ...]]:
    text = value.strip()
    if not text.startswith("-----BEGIN"):
        candidate = Path(text).expanduser()
        if not candidate.is_file():
            raise AuthConfigurationError(f"{name} must be a PEM public key or the path to one")
        text = candidate.read_text(encoding="utf-8").strip()
    if "\\n" in text and "\n" not in text:  # a PEM squeezed into one env-var line
        text = text.replace("\\n", "\n")
    try:
        key = load_pem_public_key(text.encode("utf-8"))
    except ValueError as exc:
        raise AuthConfigurationError(f"{name} is not a PEM public key: {exc}") from exc
    if isinstance(key, rsa.RSAPublicKey):
        return key, RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key, EC_ALGORITHMS
    raise AuthConfigurationError(f"{name} is a {type(key).__name__}; use an RSA or EC key")
