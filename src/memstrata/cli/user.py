"""``memstrata user``: list the users memstrata holds data of, erase one (GDPR erasure).

User ids are any text an API caller gave (a token's subject, say): the table and the
warnings show an id that does not show as it is in one escaped form, which ``erase
--user-json`` takes back (:mod:`memstrata.cli.user_ids`).
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from memstrata.cli.app import app, fail, guarded, load_settings, runtime_for
from memstrata.cli.user_ids import from_json, shown, shows_as_is
from memstrata.errors import InvalidUserIdError, SandboxError
from memstrata.memory.kinds import validate_user_id
from memstrata.terminal import json_text, visible

if TYPE_CHECKING:  # the runtime is imported when a command opens it (runtime_for)
    from memstrata.runtime import Memstrata
    from memstrata.sandbox.erasing import UnfinishedErasure

user_app = typer.Typer(
    help="One user's data: list the users, erase one (docs/DEPLOY.md).", no_args_is_help=True
)
app.add_typer(user_app, name="user")


@user_app.command("erase")
def user_erase(
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="The user to erase, as it is.")
    ] = None,
    user_json: Annotated[
        str | None,
        typer.Option(
            "--user-json",
            metavar="JSON",
            help="The user to erase as a JSON string, quotes included: the form `user list` "
            'shows an id in when it does not show as it is ("a\\u202eb"), or a string '
            "of `user list --json`.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask; required when stdin is no terminal.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Erase everything memstrata holds of one user, for good: memory files, search rows,
    index snapshots, skill switches, and the user's sandboxes under this host's
    MEMSTRATA_SANDBOX_ROOT; running processes drop their cached agents and search index of
    the user. Backups and logs are not touched (docs/DEPLOY.md, "Erasing a user"). Safe to
    run again."""
    user = _user_to_erase(user, user_json)
    guarded(lambda: validate_user_id(user))
    if not yes:
        if not sys.stdin.isatty():
            fail(f"not erasing {user!r}: this cannot be undone; add --yes to confirm", code=2)
        typer.confirm(
            f"Erase every memory file, search row, skill switch and sandbox of {user!r}? "
            "This cannot be undone",
            abort=True,
        )
    with runtime_for(load_settings(), None) as mem:  # neither command embeds
        erasure = guarded(lambda: mem.erase_user(user))
    if as_json:
        typer.echo(json_text(erasure.to_dict()))
        return
    typer.echo(f"erased {user!r}" if erasure.found else f"nothing of {user!r} was stored")
    for table, count in erasure.deleted.items():
        typer.echo(f"  {table:24s} {count} row(s) deleted")
    state = (
        f"kept, counters only (generation {erasure.generation})" if erasure.generation else "none"
    )
    typer.echo(f"  {'memory_index_state':24s} {state}")
    typer.echo(f"  {'sandbox':24s} {_SANDBOX[erasure.sandbox]}")


_SANDBOX = {
    "removed": "removed",
    "absent": "none here",
    "skipped": "skipped: the sandbox provider cannot erase; remove it by hand",
}


@user_app.command("list")
def user_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array.")] = False,
) -> None:
    """Every user with a memory file, a search row or a skill switch, with how many; and,
    on stderr, the sandboxes under this host's MEMSTRATA_SANDBOX_ROOT that an erase cut
    short left behind (run that erase again)."""
    with runtime_for(load_settings(), None) as mem:  # neither command embeds
        users = guarded(mem.list_users)
        _warn_unfinished(mem)
    if as_json:
        typer.echo(json_text([u.to_dict() for u in users]))
        return
    if not users:
        typer.echo("no users")
        return
    ids = [shown(u.user_id) for u in users]
    width = max(len("user"), *map(len, ids))
    typer.echo(f"{'user':{width}s}  files   rows  skills")
    for u, user_id in zip(users, ids, strict=True):
        typer.echo(f"{user_id:{width}s}  {u.files:5d}  {u.rows:5d}  {u.skills:6d}")


def _warn_unfinished(mem: Memstrata) -> None:
    """One warning line per erasure cut short (``sandbox.erasing``): stdout stays the list,
    and the table or JSON array a script reads keeps its shape."""
    from memstrata.sandbox.local import LocalSandboxProvider
    from memstrata.sandbox.timed import TimedSandboxProvider

    sandboxes = mem.sandboxes
    if isinstance(sandboxes, TimedSandboxProvider):  # the host's provider is inside
        sandboxes = sandboxes.inner
    if not isinstance(sandboxes, LocalSandboxProvider):
        return
    try:
        left = sandboxes.unfinished_erasures()
    except SandboxError as exc:
        typer.echo(f"warning: unfinished erasures not checked: {visible(str(exc))}", err=True)
        return
    for erasure in left:
        typer.echo(f"warning: {visible(_unfinished(erasure))}", err=True)


def _unfinished(erasure: UnfinishedErasure) -> str:
    what = f"an erase cut short left {erasure.path} (sandbox files of"
    if erasure.user_id is None:
        return f"{what} a user whose id its name does not give); remove it by hand"
    option = "--user" if shows_as_is(erasure.user_id) else "--user-json"
    again = f"memstrata user erase {option} {shlex.quote(shown(erasure.user_id))} --yes"
    return f"{what} {erasure.user_id!r}); run `{again}` to finish it"


def _user_to_erase(user: str | None, user_json: str | None) -> str:
    """The id ``--user`` gives as it is, or ``--user-json`` as a JSON string; exactly one
    of them (exit status 2 otherwise, as for a bad option). Two options, not one that
    guesses: an id may itself look like JSON (``"q"``), and a guess would erase another."""
    if user is not None and user_json is not None:
        fail("give --user or --user-json, not both", code=2)
    if user is not None:
        return user
    if user_json is None:
        fail(
            "give the user to erase: --user ID, or --user-json '\"ID\"' as `user list` shows it", 2
        )
    try:
        return from_json(user_json)
    except InvalidUserIdError as exc:
        fail(str(exc), code=2)
