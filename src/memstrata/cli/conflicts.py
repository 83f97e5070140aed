"""``memstrata conflicts``: the agents' edits that sync kept aside in a user's sandbox.

A thin transport over :mod:`memstrata.memory.conflicts`, as ``/api/memory/conflicts`` is:
the names, the paging, the refusals and their messages are the service's; this module
prints them. A refusal (a bad user id, name, file or page, a copy that is not there, a
sandbox that fails) is one ``error:`` line and exit status 1. The sandboxes are the ones
under this host's ``MEMSTRATA_SANDBOX_ROOT``, as for ``memstrata user erase``: the
provider the runtime builds (``sandbox.build.build_sandboxes``), and no database, as the
copies live in the sandbox alone — so these commands work while the database is down, and need no
``MEMSTRATA_DATABASE_URL`` in production. The agents wrote the copies: text of theirs
shown on a terminal goes through :func:`~memstrata.terminal.visible`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from memstrata.cli.app import app, fail, guarded, load_settings
from memstrata.cli.user_ids import UserJson, chosen_user, user_option
from memstrata.errors import InvalidFileTypeError
from memstrata.memory.conflicts import (
    DEFAULT_PAGE,
    MAX_PAGE,
    CopyPage,
    CopySummary,
    CopyText,
    check_page,
    dismiss_copy,
    list_copies,
    parse_name,
    read_copy,
)
from memstrata.memory.kinds import FileKind, api_kind, validate_user_id
from memstrata.sandbox.build import build_sandboxes
from memstrata.terminal import json_text, visible

# The REST schemas (FastAPI) are imported where used, with --json only: at the top they
# would be in every command's start-up.
if TYPE_CHECKING:
    from memstrata.sandbox.timed import TimedSandboxProvider

conflicts_app = typer.Typer(
    help="The agents' edits that sync kept aside in a user's sandbox: list, show, dismiss "
    '(docs/API.md, "Kept-aside agent edits").',
    no_args_is_help=True,
)
app.add_typer(conflicts_app, name="conflicts")

User = Annotated[
    str | None, typer.Option("--user", "-u", help="The user whose sandbox to look in.")
]
Name = Annotated[str, typer.Argument(help="The copy's name, as `conflicts list` prints it.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the REST API's JSON body.")]


def listing(user: str) -> str:
    """What a refusal names as the list of copies: this command, for this user."""
    return f"`memstrata conflicts list {user_option(user)}`"


@conflicts_app.command("list")
def conflicts_list(
    user: User = None,
    user_json: UserJson = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="Only the copies of user, soul or memory.")
    ] = None,
    offset: Annotated[int, typer.Option(help="Copies to skip (newest first).")] = 0,
    limit: Annotated[int, typer.Option(help=f"Copies per page, 1 to {MAX_PAGE}.")] = DEFAULT_PAGE,
    as_json: AsJson = False,
) -> None:
    """One page of the user's kept-aside copies, newest first: each an agent's edit that
    conflicted with a human's (the stored version won) or that the database refused. Exit
    status 1 when the sandbox failed (the copies it could read are printed)."""
    user = chosen_user(user, user_json)
    guarded(lambda: validate_user_id(user))
    kind = None if file is None else _file_kind(file)
    _checked_page(offset, limit)
    page = asyncio.run(list_copies(_sandboxes(), user, kind=kind, offset=offset, limit=limit))
    if as_json:
        from memstrata.api.conflict_schemas import ConflictList

        typer.echo(json_text(ConflictList.of(page).model_dump(mode="json")))
    else:
        _print_page(page, user, kind)
    if page.sandbox != "ok":
        fail(" ".join(page.warnings))


def _file_kind(file: str) -> FileKind:
    """``--file`` as the listing takes it, refused as REST and MCP refuse ``file``: their
    English message, with what was given. ``api_kind``'s own message leads with the spec's
    400 detail, 无效的文件名, and for ``agents`` tells a writer to write another file,
    though nothing is written here."""
    try:
        return api_kind(file)
    except InvalidFileTypeError:
        from memstrata.api.errors import INVALID_FILE_NAME_MESSAGE

        fail(f"{INVALID_FILE_NAME_MESSAGE} (--file {file[:100]!r})")


def _checked_page(offset: int, limit: int) -> None:
    try:
        check_page(offset, limit)  # the service's bounds and words, before any start-up
    except ValueError as exc:
        fail(str(exc))


def _print_page(page: CopyPage, user: str, kind: FileKind | None) -> None:
    of = f" of {kind.filename}" if kind else ""
    if not page.copies:
        if page.total == 0:
            typer.echo(f"no kept-aside copies{of} for {user!r}")
        elif page.total is not None:
            typer.echo(f"no copies past offset {page.offset}: {user!r} has {page.total}{of}")
        return
    width = max(len(s.copy.name) for s in page.copies)
    typer.echo(f"{'name':{width}s}  file    reason    saved at (UTC)       bytes")
    for summary in page.copies:
        typer.echo(_row(summary, width))
        for line in (summary.preview or "").splitlines():
            typer.echo(f"    | {visible(line)}")
    last = page.offset + len(page.copies)
    shown = f"copies {page.offset + 1}-{last} of {page.total}{of}, newest first"
    more = "" if page.next_offset is None else f"; next page: --offset {page.next_offset}"
    typer.echo(f"{shown}{more}")


def _row(summary: CopySummary, width: int) -> str:
    copy = summary.copy
    size = "?" if summary.size_bytes is None else str(summary.size_bytes)
    saved = f"{copy.saved_at:%Y-%m-%d %H:%M:%S}"
    return f"{copy.name:{width}s}  {copy.kind.api_name:6s}  {copy.reason:8s}  {saved}  {size:>5s}"


@conflicts_app.command("show")
def conflicts_show(
    name: Name, user: User = None, user_json: UserJson = None, as_json: AsJson = False
) -> None:
    """One copy, whole: its text on stdout exactly as kept (what it is, on stderr). On a
    terminal, the characters it would act on (escape sequences, other control characters,
    bidi controls) are shown as escapes such as `\\x1b`; redirect stdout for the exact text."""
    user = _check(chosen_user(user, user_json), name)
    sandboxes = _sandboxes()
    text = guarded(lambda: asyncio.run(read_copy(sandboxes, user, name, listing=listing(user))))
    if as_json:
        from memstrata.api.conflict_schemas import ConflictContent

        typer.echo(json_text(ConflictContent.of(text).model_dump(mode="json")))
        return
    shown = shown_content(text.content, terminal=sys.stdout.isatty())
    typer.echo(_about(text, escaped=shown != text.content), err=True)
    # color=True: click would otherwise strip what looks like a colour code from text that
    # is not going to a terminal, and the copy redirected to a file would not be exact.
    typer.echo(shown, nl=False, color=True)


def shown_content(content: str, *, terminal: bool) -> str:
    """A copy's text as ``show`` prints it: exact into a file or a pipe, where it is
    data; on a terminal, with what the terminal would act on as visible escapes, as the
    agent that wrote it could otherwise clear the screen, set the clipboard or make the
    text read other than it is."""
    return visible(content, lines=True) if terminal else content


def _about(text: CopyText, *, escaped: bool = False) -> str:
    copy = text.copy
    why = (
        "the database refused the agent's text"
        if copy.rejected
        else "it conflicted with a human's edit; the stored version won"
    )
    where = "" if copy.session_dir is None else f" in session sandbox {copy.session_dir!r}"
    undecodable = (
        "; not UTF-8 text: bytes that do not decode show as U+FFFD" if text.undecodable else ""
    )
    control = (
        "; control characters are shown as escapes such as \\x1b (redirect stdout for the "
        "exact text)"
        if escaped
        else ""
    )
    return (
        f"{copy.kind.filename} kept aside{where} at {copy.saved_at:%Y-%m-%d %H:%M:%S} UTC "
        f"({why}), {text.size_bytes} bytes{undecodable}{control}"
    )


@conflicts_app.command("dismiss")
def conflicts_dismiss(
    name: Name, user: User = None, user_json: UserJson = None, as_json: AsJson = False
) -> None:
    """Delete one copy from the sandbox: the user has seen it and lets it go. Dismissing it
    again says there is no such copy (exit status 1)."""
    user = _check(chosen_user(user, user_json), name)
    sandboxes = _sandboxes()
    copy = guarded(lambda: asyncio.run(dismiss_copy(sandboxes, user, name, listing=listing(user))))
    if as_json:
        from memstrata.api.conflict_schemas import ConflictDismissed

        typer.echo(ConflictDismissed(name=copy.name).model_dump_json())
        return
    typer.echo(f"dismissed {copy.name}")


def _check(user: str, name: str) -> str:
    """The user id and the name, refused before the settings are read; the user id."""
    guarded(lambda: validate_user_id(user))
    guarded(lambda: parse_name(name, listing=listing(user)))
    return user


def _sandboxes() -> TimedSandboxProvider:
    """The sandboxes ``Memstrata.open`` would use with these settings, without the rest of
    the runtime: the copies are in the sandbox only, so no database is opened (nor is
    ``MEMSTRATA_DATABASE_URL`` required in production), and no embedding server started."""
    return build_sandboxes(load_settings(opens_database=False))
