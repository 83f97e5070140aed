"""How ``memstrata user`` shows a user id, and reads a shown one back.

User ids are any text an API caller gave, and some of it does not show as it is: a bidi
or C1 control shown as its escape (``terminal.visible``) looks like an id that holds that
escape's backslash, letter and digits; a zero-width space, a soft hyphen or a Hangul
filler show as nothing, a no-break space as a space, a decomposed "é" as the composed one.
Two ids listed alike could not be told apart, nor erased by the text the list showed:
``user erase --user 'a\\u202eb'``, typed as listed, erased the id that holds a backslash.

Such an id is shown in one escaped form: a JSON string of ASCII, quotes included, every
other character a ``\\uXXXX`` escape (``"a\\u202eb"``). A shown value starts with a quote
only in that form (an id that itself starts with one is shown escaped too), and
``--user-json`` takes it back, as it takes the strings of ``user list --json``: every
command that takes ``--user`` takes ``--user-json`` instead (``UserJson``, ``chosen_user``).
An id that shows as it is — any printable text, non-ASCII letters included — is shown as
it is.
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from typing import Annotated

import typer

from memstrata.cli.app import fail
from memstrata.errors import InvalidUserIdError

# The option beside each command's ``--user`` (exactly one of the two: ``chosen_user``).
UserJson = Annotated[
    str | None,
    typer.Option(
        "--user-json",
        metavar="JSON",
        help="The user as a JSON string, quotes included, instead of --user: the form "
        '`memstrata user list` shows an id in when it does not show as it is ("a\\u202eb"), '
        "or a string of `user list --json`.",
    ),
]
MISSING_USER = (
    "Missing option '--user': give --user ID, or --user-json '\"ID\"' as `memstrata user "
    "list` shows it"
)

# Unicode's Default_Ignorable_Code_Point: shown as nothing, or as a blank, though some are
# "printable" to Python (U+034F, the Hangul fillers, variation selectors); and the Braille
# blank (U+2800), printable and no ignorable, which shows as a space.
_IGNORABLE = re.compile(
    "[\u00ad\u034f\u2800\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def shows_as_is(user_id: str) -> bool:
    """Whether ``user_id`` printed as it is reads back as itself and as no other id:
    printable (no control, format or separator character but the ASCII space), nothing
    that shows as nothing, composed (NFC), and not starting with the escaped form's quote."""
    return (
        user_id.isprintable()
        and _IGNORABLE.search(user_id) is None
        and unicodedata.is_normalized("NFC", user_id)
        and not user_id.startswith('"')
    )


def shown(user_id: str) -> str:
    """``user_id`` as ``user list`` shows it: as it is, or in the escaped form (ASCII, so
    nothing in it acts on a terminal either)."""
    return user_id if shows_as_is(user_id) else json.dumps(user_id)


def from_json(text: str) -> str:
    """The id a JSON string stands for (the escaped form, or a string of ``user list
    --json``); ``InvalidUserIdError`` for anything else. The id is not checked here."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, str):
        raise InvalidUserIdError(
            "--user-json takes the id as a JSON string, quotes included, as `memstrata user "
            "list` shows an escaped one: e.g. '\"bob\\u200b\"'"
        )
    return value


def chosen_user(user: str | None, user_json: str | None) -> str:
    """The id ``--user`` gives as it is, or ``--user-json`` as a JSON string; exactly one
    of them (exit status 2 otherwise, as for a bad option). Two options, not one that
    guesses: an id may itself look like JSON (``"q"``), and a guess would take another
    user's. The id is not checked here: each command checks it as it did."""
    if user is not None and user_json is not None:
        fail("give --user or --user-json, not both", code=2)
    if user is not None:
        return user
    if user_json is None:
        fail(MISSING_USER, code=2)
    try:
        return from_json(user_json)
    except InvalidUserIdError as exc:
        fail(str(exc), code=2)


def user_option(user_id: str) -> str:
    """``user_id`` as a command line gives it, quoted for a shell: ``--user ID`` when it
    shows as it is, else ``--user-json '"…"'``."""
    option = "--user" if shows_as_is(user_id) else "--user-json"
    return f"{option} {shlex.quote(shown(user_id))}"
