"""Bearer-token (JWT) authentication, and the development secret.

Accepted tokens: HS256/384/512 signed with ``MEMSTRATA_JWT_SECRET``, and/or RS*/PS*/ES*
verified with ``MEMSTRATA_JWT_PUBLIC_KEY`` (a PEM text or a path to one). Each algorithm is
bound to one kind of key (the secret, or the public key; plus the rotation keys of that
kind, below), picked by the token's ``alg`` from ``MEMSTRATA_JWT_ALGORITHMS``,
so a token can never choose its own verification method (``alg: none``, or an RS256 public
key used as an HMAC secret). ``exp`` is required; ``aud`` is checked when
``MEMSTRATA_JWT_AUDIENCE`` is set (and a token carrying an ``aud`` is refused when it is not).
The user id is the ``MEMSTRATA_JWT_USER_CLAIM`` claim (default ``sub``): a string of 1–100
characters that ``validate_user_id`` accepts (no NUL, no lone surrogates).
``exp``/``nbf``/``iat`` allow ``MEMSTRATA_JWT_LEEWAY_S`` seconds of clock skew (default 30).
With ``MEMSTRATA_JWT_MAX_LIFETIME_S``, a token whose ``exp`` lies further ahead is refused.
Tokens minted here carry a ``kid`` (a hash prefix of the secret), so a token signed with
another key is logged as ``auth.token.foreign_key`` and a forged one as
``auth.token.forged`` — both answered 401. Every refusal says what to do
(:mod:`memstrata.api.token_refusals`).

An expired token is refused, except where a caller asks for it: ``expired_grace_s`` accepts
one that expired at most that long ago (beyond the leeway) and is otherwise valid — for
``DELETE /mcp``, so a client whose token ran out can still end its own session
(:class:`memstrata.mcp.http.BearerGate`).

Key rotation: ``MEMSTRATA_JWT_ROTATION_SECRETS`` and ``MEMSTRATA_JWT_ROTATION_PUBLIC_KEYS``
are accepted beside the configured secret and public key (the next key before the signer
switches to it, the previous one until its last token has expired; docs/DEPLOY.md). A
token whose ``kid`` names one of the secrets is checked with that one; any other token is
tried with each key of its algorithm in turn. Rotation keys keep the binding above: a
secret only ever verifies HS*, an RSA key RS*/PS*, an EC key ES*.

In development (``MEMSTRATA_ENVIRONMENT=development``, the default), with neither a secret
nor a public key configured, a random secret is generated once and kept in
``<data_dir>/jwt_secret`` (mode 0600); ``memstrata token`` signs development tokens with
it; a token signed with another key is refused with the data directory to mint one with,
told only to a caller on this machine (loopback; :data:`CALLER_HOST`). Any other
environment refuses to verify or sign tokens without one, and production
refuses a secret shorter than 32 characters (:func:`require_token_keys`). These are checked
here, where tokens are verified (``create_app``, ``memstrata serve``) or signed
(``memstrata token``), not in ``Settings``: ``memstrata db``, ``memstrata mcp`` over stdio
and the library authenticate nobody and run without them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import os
import secrets
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from memstrata.api.token_refusals import AuthenticationError, Refusals
from memstrata.config import Settings
from memstrata.errors import InvalidUserIdError, MemstrataError
from memstrata.logs import log_event
from memstrata.memory.kinds import validate_user_id

logger = logging.getLogger(__name__)

DEV_SECRET_FILE = "jwt_secret"
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")
SUPPORTED_ALGORITHMS = HMAC_ALGORITHMS + RSA_ALGORITHMS + EC_ALGORITHMS
MIN_PRODUCTION_SECRET_CHARS = 32
# The registered claims that are times (RFC 7519 §4.1.4-6): NumericDate, a JSON number.
_TIME_CLAIMS = ("exp", "nbf", "iat")
# The address of the client whose request is being served (memstrata.api.middleware's
# LocalCallerMiddleware sets it; read only when a hint may be given). Unset — a host app's
# own stack, the library — is a caller anywhere.
CALLER_HOST: ContextVar[str | None] = ContextVar("memstrata_caller_host", default=None)


class AuthConfigurationError(MemstrataError, ValueError):
    """The JWT settings cannot verify any token (bad key, no usable algorithm)."""


@dataclass(frozen=True)
class Authenticator:
    """Verifies bearer tokens; ``keys`` maps each accepted algorithm to its keys, all of
    one kind: the configured one first, then those accepted during a rotation."""

    keys: Mapping[str, Sequence[Any]]
    user_claim: str = "sub"
    audience: str | None = None
    leeway_s: float = 30.0
    max_lifetime_s: float | None = None
    issuer: str | None = None
    # The data directory whose development secret signs and verifies tokens, when that
    # secret is the one in use: its refusals say how to mint a token this server takes.
    dev_data_dir: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(
            _keys(settings),
            settings.jwt_user_claim,
            settings.jwt_audience,
            settings.jwt_leeway_s,
            settings.jwt_max_lifetime_s,
            settings.jwt_issuer or None,
            settings.data_dir if uses_dev_secret(settings) else None,
        )

    @property
    def algorithms(self) -> list[str]:
        return sorted(self.keys)

    @property
    def refusals(self) -> Refusals:
        """The words of this authenticator's 401s (:mod:`memstrata.api.token_refusals`)."""
        verifies_secret = any(isinstance(key, str) for keys in self.keys.values() for key in keys)
        return Refusals(
            self.user_claim,
            self.audience,
            self.issuer,
            self.leeway_s,
            verifies_secret,
            self.dev_data_dir,
        )

    def authenticate(self, authorization: str | None, *, expired_grace_s: float = 0.0) -> str:
        """The user id from an ``Authorization`` header value, or ``AuthenticationError``
        (``ExpiredTokenError`` for a token refused only for its age, as far as checked).
        ``expired_grace_s``: accept a token that expired at most this long ago (beyond the
        leeway) and is otherwise valid."""
        if not authorization or not authorization.strip():
            raise AuthenticationError(
                "missing bearer token: send 'Authorization: Bearer <token>'",
                invalid_token=False,
            )
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise AuthenticationError(
                f"unsupported authorization scheme {scheme[:20]!r}: use 'Bearer <token>'"
            )
        return self.user_id(token.strip(), expired_grace_s=expired_grace_s)

    def user_id(self, token: str, *, expired_grace_s: float = 0.0) -> str:
        claims = self.verify(token, expired_grace_s=expired_grace_s)
        value = claims.get(self.user_claim)
        if value is None:
            raise self.refusals.missing_claim(self.user_claim)
        if not isinstance(value, str):
            raise self.refusals.not_a_string(self.user_claim)
        try:
            return validate_user_id(value)
        except InvalidUserIdError as exc:
            raise self.refusals.bad_user_id(str(exc)) from exc

    def verify(self, token: str, *, expired_grace_s: float = 0.0) -> dict[str, Any]:
        """The verified claims of ``token``; every failure is an ``AuthenticationError``."""
        if not token:
            raise self.refusals.empty()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthenticationError(
                "malformed token: not a JWT (three base64url parts joined by dots); send it "
                "as issued, without quotes"
            ) from exc
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.keys:
            raise self.refusals.algorithm(alg, self.algorithms)
        kid = header.get("kid")
        for key in self._candidates(alg, kid if isinstance(kid, str) else None):
            claims = self._decode(token, key, alg, check_exp=expired_grace_s <= 0)
            if claims is not None:
                self._check_claims(claims, expired_grace_s)
                return claims
        foreign = self._log_bad_signature(header, alg)
        raise self.refusals.bad_signature(foreign=foreign, local=is_loopback(CALLER_HOST.get()))

    def _candidates(self, alg: str, kid: str | None) -> Sequence[Any]:
        """The keys to try: the secret whose key id the token names (``memstrata token``
        sets it), else each key of the algorithm in turn (an identity provider's ``kid``
        means nothing here, and a token of a removed key names none of ours)."""
        keys = self.keys[alg]
        named = [key for key in keys if kid is not None and key_id(key) == kid]
        return named or keys

    def _decode(self, token: str, key: Any, alg: str, *, check_exp: bool) -> dict[str, Any] | None:
        """The claims of ``token`` verified with ``key``; None if its signature is not this
        key's; any other failure is an ``AuthenticationError``. Without ``check_exp``, an
        expired token passes here (:meth:`_check_claims` bounds how long ago)."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                options={
                    "require": ["exp"] if self.issuer is None else ["exp", "iss"],
                    "verify_exp": check_exp,
                },
                leeway=self.leeway_s,
            )
        except jwt.ExpiredSignatureError as exc:
            raise self.refusals.expired() from exc
        except jwt.MissingRequiredClaimError as exc:
            raise self.refusals.missing_claim(exc.claim) from exc
        except jwt.InvalidAudienceError as exc:
            raise self.refusals.audience_refused() from exc
        except jwt.InvalidIssuerError as exc:
            raise self.refusals.issuer_refused() from exc
        except jwt.InvalidSignatureError:
            return None
        except jwt.ImmatureSignatureError as exc:
            raise self.refusals.not_yet_valid() from exc
        except jwt.exceptions.InvalidSubjectError as exc:  # PyJWT's "Subject must be a string"
            raise self.refusals.not_a_string("sub") from exc
        except jwt.PyJWTError as exc:
            raise self.refusals.invalid(str(exc)) from exc
        return claims

    def _check_claims(self, claims: Mapping[str, Any], expired_grace_s: float) -> None:
        """What PyJWT lets through: an empty ``aud`` when no audience is configured (it
        checks only a non-empty one), times sent as numeric strings (it converts them), and
        with ``expired_grace_s`` any ``exp`` (its check was off)."""
        if self.audience is None and "aud" in claims:
            raise self.refusals.audience_refused()
        for name in _TIME_CLAIMS:
            value = claims.get(name)
            if name in claims and not _is_number(value):
                raise self.refusals.not_a_number(name)
        now = time.time()
        # Compared, not subtracted: arithmetic with an int 'exp' such as 10**400 overflows.
        if expired_grace_s > 0 and claims["exp"] < now - self.leeway_s - expired_grace_s:
            raise self.refusals.expired()
        # Measured from now, not from ``iat``: an issuer may leave ``iat`` out or set it
        # at will, while what the bound limits is how long this token still works.
        latest = now + (self.max_lifetime_s or 0.0) + self.leeway_s
        if self.max_lifetime_s is not None and claims["exp"] > latest:
            raise self.refusals.too_long_lived(self.max_lifetime_s)

    def _log_bad_signature(self, header: Mapping[str, Any], alg: str) -> bool:
        """Tell a token signed with another key (its ``kid`` is none of ours: a secret not
        or no longer accepted, another deployment) from a forged or corrupted one (one of
        our ``kid``s, or none); True for the first."""
        kid = header.get("kid")
        ours = [i for i in map(key_id, self.keys[alg]) if i is not None]
        if isinstance(kid, str) and ours and kid not in ours:
            log_event(
                logger,
                "auth.token.foreign_key",
                logging.WARNING,
                kid=kid[:64],
                expected=",".join(ours),
            )
            return True
        log_event(
            logger,
            "auth.token.forged",
            logging.WARNING,
            kid=kid[:64] if isinstance(kid, str) else None,
        )
        return False


def _is_number(value: object) -> bool:
    """A JSON number PyJWT's own checks can compare: not a bool, not NaN or infinite
    (Python's JSON reader takes ``NaN`` and ``Infinity``, and NaN compares false to all)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, float) or math.isfinite(value)


@contextmanager
def calling_from(host: str | None) -> Iterator[None]:
    """Authenticate the requests served within as coming from ``host`` (the client's
    address; None when unknown): only a loopback one gets the development hints. For a
    host app's own middleware and for tests; ``create_app`` sets it per request."""
    token = CALLER_HOST.set(host)
    try:
        yield
    finally:
        CALLER_HOST.reset(token)


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is an address of this machine's loopback (127.0.0.0/8, ::1, or
    127.x mapped into IPv6); a name, anything unparsable or None is not."""
    if host is None:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback


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
    # As serve checks them (_keys): an unsupported entry is named before anything else.
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


def _keys(settings: Settings) -> dict[str, tuple[Any, ...]]:
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
