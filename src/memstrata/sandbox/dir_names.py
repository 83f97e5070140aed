"""Directory names for user and session ids: deterministic and injective.

:class:`~memstrata.sandbox.local.LocalSandboxProvider` lays out one directory per user
(and per session inside it) under names made by :func:`safe_dir_name`, so two ids never
share a directory.
"""

from __future__ import annotations

import hashlib

_SAFE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
# Room for the hash suffix well inside the 255-byte NAME_MAX of common filesystems.
_MAX_ENCODED = 120
_KEEP_ON_HASH = 64


def safe_dir_name(identifier: str) -> str:
    """A directory name for an arbitrary id: deterministic and injective.

    Lowercase ASCII letters, digits, ``-`` and ``_`` are kept; every other UTF-8 byte becomes
    ``%XX`` (upper-case hex). Upper-case letters are escaped too, so ``Alice`` and ``alice``
    stay distinct on case-insensitive filesystems, and ``.`` is escaped so ``..`` can never
    be a name. Encodings longer than 120 characters are cut (never inside an escape) and
    followed by ``~`` and 32 hex digits of the id's SHA-256; ``~`` never appears in an
    encoding, so the two forms cannot collide, and two hashed names collide only if 128
    bits of SHA-256 do.
    """
    encoded = "".join(
        char
        if char in _SAFE_CHARS
        else "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        for char in identifier
    )
    if len(encoded) <= _MAX_ENCODED:
        return encoded
    cut = _KEEP_ON_HASH
    while "%" in encoded[cut - 2 : cut]:
        cut -= 1
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{encoded[:cut]}~{digest}"
