"""The types of the secret settings (the database URL's password, the embedding API keys,
the JWT secrets): shown masked by ``repr()``/``str()`` and ``model_dump_json()`` of the
settings, read as they are by everything else.

A host that logs its ``Settings``, or a traceback that shows one, used to print every
secret. pydantic's ``SecretStr`` would hide them too, but every reader of these fields (a
few dozen, the database URL parsed, signed and connected with) would then have to unwrap
it; the values here stay ``str``s — only their ``repr`` masks them — and JSON masks them
unless asked with ``model_dump_json(context={"reveal_secrets": True})`` (a spec passed on to
a child process on purpose).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, PlainSerializer, SerializationInfo

MASK = "**********"
# The ``model_dump_json`` context key that keeps the secrets' values.
REVEAL = "reveal_secrets"
# The password of a URL's ``user:password@``: what ``ConcealedUrl`` masks.
_URL_PASSWORD = re.compile(r"^([^:/?#]+://[^:/?#@]*:)([^@/?#]*)(@)")


class Concealed(str):
    """A secret's value: the ``str`` it is everywhere, but its ``repr`` masks it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(MASK)


class ConcealedUrl(str):
    """A URL that may carry a password: its ``repr`` masks the password only, so the URL
    still says which server it names."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(masked_url(self))


def masked_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part (if any) as ``***``."""
    return _URL_PASSWORD.sub(r"\1***\3", str(url), count=1)


def _json_secret(value: str, info: SerializationInfo) -> str:
    return str(value) if _revealed(info) else MASK


def _json_url(value: str, info: SerializationInfo) -> str:
    return str(value) if _revealed(info) else masked_url(value)


def _revealed(info: SerializationInfo) -> bool:
    context: Any = info.context
    return isinstance(context, dict) and context.get(REVEAL) is True


Secret = Annotated[str, AfterValidator(Concealed), PlainSerializer(_json_secret, when_used="json")]
SecretUrl = Annotated[
    str, AfterValidator(ConcealedUrl), PlainSerializer(_json_url, when_used="json")
]
