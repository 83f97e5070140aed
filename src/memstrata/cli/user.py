"""``memstrata user``: list the users memstrata holds data of, erase one (GDPR erasure).

User ids are any text an API caller gave (a token's subject, say): the table and the
warnings show an id that does not show as it is in one escaped form, which ``erase
--user-json`` takes back (:mod:`memstrata.cli.user_ids`). ``erase`` also takes an id that
today's rule refuses when the database holds rows under it (``memory.erase``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from memstrata.cli.app import app, fail, guarded, load_settings, runtime_for
from memstrata.cli.user_ids import UserJson, chosen_user, shown, user_option
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
    user_json: UserJson = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask; required when stdin is no terminal.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Erase everything memstrata holds of one user, for good: memory files, search rows,
    index snapshots, skill switches, and the user's sandboxes under this host's
    MEMSTRATA_SANDBOX_ROOT; running processes drop their cached agents and search index of
    the user. Backups and logs are not touched (docs/DEPLOY.md, "Erasing a user"). Safe to
    run again. An id that today's rule refuses (a control character, say) is erased when
    rows are stored under it: stored before the rule existed."""
    from memstrata.memory.erase import erasable_user_id

    user = chosen_user(user, user_json)
    valid = _valid(user)
    if valid:  # asked before anything is opened
        _confirm(user, yes)
    with runtime_for(load_settings(), None) as mem:  # neither command embeds
        if not valid:  # erasable if stored before the rule refused it
            guarded(lambda: erasable_user_id(mem.db_sessions, user))
            _confirm(user, yes)
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


def _valid(user: str) -> bool:
    try:
        validate_user_id(user)
    except InvalidUserIdError:
        return False
    return True


def _confirm(user: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"not erasing {user!r}: this cannot be undone; add --yes to confirm", code=2)
    typer.confirm(
        f"Erase every memory file, search row, skill switch and sandbox of {user!r}? "
        "This cannot be undone",
        abort=True,
    )


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
    again = f"memstrata user erase {user_option(erasure.user_id)} --yes"
    return f"{what} {erasure.user_id!r}); run `{again}` to finish it"
