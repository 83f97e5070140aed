"""The 401s of bearer-token authentication, each saying what to do about it.

One place for their words, so that REST, ``/mcp`` and the web page's sign-in (which shows
the ``detail`` as it is) all say the same. A refusal names what to change: the token
(send it as issued, get a new one — from ``memstrata token`` when the server verifies an
HS* secret, else from the identity provider that owns the public key) or, where the
server's set-up is the likely cause, the ``MEMSTRATA_JWT_*`` setting. It names settings,
never their values, except what a token must carry anyway (the audience, the issuer); the
development data directory is named only by :class:`memstrata.api.auth.Authenticator`'s
caller on this machine.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from memstrata.api.api_error import ApiError

REALM = "memstrata"
_UNSAFE_DESCRIPTION = re.compile(r'[^\x20-\x7e]|["\\]')


class AuthenticationError(ApiError):
    """401 with ``WWW-Authenticate: Bearer`` (RFC 6750)."""

    # Its cause has a log line of its own already (a bad signature: ``auth.token.forged``):
    # a transport that logs refusals does not log it a second time.
    logged = False

    def __init__(self, detail: str, *, invalid_token: bool = True) -> None:
        challenge = f'Bearer realm="{REALM}"'
        if invalid_token:  # RFC 6750 §3: no error code when no credentials were sent
            description = _UNSAFE_DESCRIPTION.sub("?", detail)
            challenge += f', error="invalid_token", error_description="{description}"'
        super().__init__(401, detail, headers={"WWW-Authenticate": challenge})


class ExpiredTokenError(AuthenticationError):
    """A token whose signature is good, refused because it has expired (its ``aud`` and
    ``iss`` are not checked yet: PyJWT stops at ``exp``)."""


@dataclass(frozen=True)
class Refusals:
    """The refusals of one authenticator's settings."""

    user_claim: str
    audience: str | None
    issuer: str | None
    leeway_s: float
    # An HS* secret is accepted, so `memstrata token` (given it) signs tokens this server
    # takes; otherwise they come from the identity provider that owns the private key.
    verifies_secret: bool
    # The data directory of the development secret, when that is the one in use.
    dev_data_dir: Path | None

    def get_new(self) -> str:
        """Where a token this server takes comes from."""
        if self.dev_data_dir is not None:
            return (
                "mint a new one (`memstrata token --user <id>`, with this server's "
                "MEMSTRATA_DATA_DIR)"
            )
        if self.verifies_secret:
            return (
                "get a new one from its issuer (`memstrata token --user <id>` signs one "
                "with the server's MEMSTRATA_JWT_SECRET)"
            )
        return (
            "get a new one from its issuer (the identity provider whose public key is the "
            "server's MEMSTRATA_JWT_PUBLIC_KEY)"
        )

    def expired(self) -> ExpiredTokenError:
        return ExpiredTokenError(f"token expired: {self.get_new()}")

    def bad_signature(self, *, foreign: bool, local: bool) -> AuthenticationError:
        """``foreign``: the token names (``kid``) a secret this server does not have;
        ``local``: the caller is on this machine (it may be told the data directory).

        With the development secret, a token of another key was, all but always, minted by
        ``memstrata token`` against another data directory (whose secret it created there):
        say which one this server uses — to the developer on this machine who ran it."""
        if foreign and local and self.dev_data_dir is not None:
            data = str(self.dev_data_dir)
            return AuthenticationError(
                "token signature is invalid: it was signed with a key this server does not "
                f"have; mint it with this server's MEMSTRATA_DATA_DIR ({data}), e.g. "
                f"`MEMSTRATA_DATA_DIR={shlex.quote(data)} memstrata token --user <id>`, or "
                "give both the same MEMSTRATA_JWT_SECRET"
            )
        if foreign:
            return AuthenticationError(
                "token signature is invalid: it was signed with a key this server does not "
                f"have; {self.get_new()}, or have the server accept that key (during a key "
                "rotation: MEMSTRATA_JWT_ROTATION_SECRETS)"
            )
        return AuthenticationError(
            "token signature is invalid: it was changed after signing, or signed with a key "
            f"this server does not have; send it exactly as issued, or {self.get_new()}"
        )

    def empty(self) -> AuthenticationError:
        return AuthenticationError(
            "empty bearer token: send the token after the scheme, 'Authorization: Bearer <token>'"
        )

    def algorithm(self, alg: object, accepted: list[str]) -> AuthenticationError:
        return AuthenticationError(
            f"token algorithm {str(alg)[:20]!r} is not accepted (accepted: "
            f"{', '.join(accepted)}): get a token signed with one of those; the server's "
            "MEMSTRATA_JWT_ALGORITHMS lists them"
        )

    def missing_claim(self, claim: str) -> AuthenticationError:
        if claim == self.user_claim:
            return AuthenticationError(
                f"token has no {claim!r} claim (the user id, a string): get a token that "
                "has one from its issuer, or set the server's MEMSTRATA_JWT_USER_CLAIM to "
                "the claim that holds the user id"
            )
        wanted = {
            "aud": f" (this server takes tokens for {self.audience!r}: MEMSTRATA_JWT_AUDIENCE)",
            "iss": f" (this server takes tokens from {self.issuer!r}: MEMSTRATA_JWT_ISSUER)",
        }.get(claim, "")
        return AuthenticationError(
            f"token has no {claim!r} claim{wanted}: get a token that has one from its issuer"
        )

    def not_a_string(self, claim: str) -> AuthenticationError:
        """A claim that must be a string and is not: ``sub`` (PyJWT checks it whatever
        claim holds the user id) or the user id's claim."""
        what = " (the user id)" if claim == self.user_claim else ""
        return AuthenticationError(
            f"token's {claim!r} claim must be a string{what}: get a token whose {claim!r} "
            "is one from its issuer"
        )

    def bad_user_id(self, problem: str) -> AuthenticationError:
        return AuthenticationError(
            f"token's {self.user_claim!r} claim: {problem}; get a token for a valid user id "
            "from its issuer"
        )

    def not_a_number(self, claim: str) -> AuthenticationError:
        return AuthenticationError(
            f"token's {claim!r} claim must be a number (seconds since 1970-01-01 UTC): get "
            "a token whose times are numbers from its issuer"
        )

    def audience_refused(self) -> AuthenticationError:
        if self.audience is None:
            return AuthenticationError(
                "token audience is not accepted: this server takes tokens without 'aud' "
                "(MEMSTRATA_JWT_AUDIENCE names the one it should accept)"
            )
        return AuthenticationError(
            f"token audience is not accepted: this server takes tokens for {self.audience!r} "
            "(MEMSTRATA_JWT_AUDIENCE); get one issued for it"
        )

    def issuer_refused(self) -> AuthenticationError:
        return AuthenticationError(
            f"token issuer is not accepted: this server takes tokens from {self.issuer!r} "
            "(MEMSTRATA_JWT_ISSUER); get one from it"
        )

    def not_yet_valid(self) -> AuthenticationError:
        return AuthenticationError(
            "token is not valid yet (nbf/iat in the future): wait until its 'nbf', or set "
            f"the issuer's clock right (this server allows {self.leeway_s:g} s of clock "
            "skew: MEMSTRATA_JWT_LEEWAY_S)"
        )

    def invalid(self, reason: str) -> AuthenticationError:
        return AuthenticationError(
            f"invalid token: {reason}; send it exactly as issued, or {self.get_new()}"
        )

    def too_long_lived(self, max_lifetime_s: float) -> AuthenticationError:
        return AuthenticationError(
            "token lives too long: it expires more than "
            f"{max_lifetime_s:.0f} s from now, the most this server accepts "
            "(MEMSTRATA_JWT_MAX_LIFETIME_S); ask the issuer for a shorter 'exp'"
        )
