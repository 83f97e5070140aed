"""Bearer-token (JWT) verification; which keys it takes from the settings (and the
development secret) is :mod:`memstrata.api.token_keys`.

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
Tokens memstrata mints carry a ``kid`` (a hash prefix of the secret), so a token signed with
another key is logged as ``auth.token.foreign_key`` and a forged one as
``auth.token.forged`` — both answered 401. Every refusal says what to do
(:mod:`memstrata.api.token_refusals`).

An expired token is refused, except where a caller asks for it: ``expired_grace_s`` accepts
one that expired at most that long ago (beyond the leeway) and is otherwise valid — for
``DELETE /mcp``, so a client whose token ran out can still end its own session
(:class:`memstrata.mcp.http.BearerGate`).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from memstrata.api.token_keys import key_id, uses_dev_secret, verification_keys
from memstrata.api.token_refusals import AuthenticationError, Refusals
from memstrata.config import Settings
from memstrata.errors import InvalidUserIdError
from memstrata.logs import log_event
from memstrata.memory.kinds import validate_user_id

logger = logging.getLogger(__name__)

# The registered claims that are times (RFC 7519 §4.1.4-6): NumericDate, a JSON number.
_TIME_CLAIMS = ("exp", "nbf", "iat")
# The address of the client whose request is being served (memstrata.api.middleware's
# LocalCallerMiddleware sets it; read only when a hint may be given). Unset — a host app's
# own stack, the library — is a caller anywhere.
CALLER_HOST: ContextVar[str | None] = ContextVar("memstrata_caller_host", default=None)


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
            verification_keys(settings),
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
        foreign = self._log_bad_signature(token, header, alg)
        error = self.refusals.bad_signature(foreign=foreign, local=is_loopback(CALLER_HOST.get()))
        error.logged = True
        raise error

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

    def _log_bad_signature(self, token: str, header: Mapping[str, Any], alg: str) -> bool:
        """Tell a token signed with another key (its ``kid`` is none of ours: a secret not
        or no longer accepted, another deployment) from a forged or corrupted one (one of
        our ``kid``s, or none); True for the first. The one line of the refusal (the
        transports log no other: ``AuthenticationError.logged``), naming the user the token
        claims to be (:meth:`_claimed_user`), never the token."""
        kid = header.get("kid")
        ours = [i for i in map(key_id, self.keys[alg]) if i is not None]
        claimed = self._claimed_user(token)
        if isinstance(kid, str) and ours and kid not in ours:
            log_event(
                logger,
                "auth.token.foreign_key",
                logging.WARNING,
                kid=kid[:64],
                expected=",".join(ours),
                claimed_user_id=claimed,
            )
            return True
        log_event(
            logger,
            "auth.token.forged",
            logging.WARNING,
            kid=kid[:64] if isinstance(kid, str) else None,
            claimed_user_id=claimed,
        )
        return False

    def _claimed_user(self, token: str) -> str | None:
        """The user a token whose signature failed names, unverified: whose account it was
        meant for (an operator's first question), in a field of its own, never ``user_id``,
        which only a verified token sets. None if it names no valid user id."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None
        value = claims.get(self.user_claim)
        try:
            return validate_user_id(value) if isinstance(value, str) else None
        except InvalidUserIdError:
            return None


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
