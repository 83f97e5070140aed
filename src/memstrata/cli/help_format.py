"""``--help`` shows a flag without a value: ``--json``, not ``--json <bool>``.

Typer 0.29's rich help prints every option's type, flags too (``--json <bool>``,
``--help <bool>``), so people typed ``--json true`` and got "Got unexpected extra
argument(s) (true)". Its plain help leaves flags bare; these classes give flags an empty
metavar, which the rich help prints as is. Typer has no app-wide command class, so
:func:`bare_flags` sets them on every registered command and group once they exist. The
command class also answers a database failure mid-command (``memstrata.cli.db_failure``).
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption


def _without_flag_types(params: list[Any]) -> list[Any]:
    for param in params:
        if isinstance(param, TyperOption) and (param.is_flag or param.count):
            param.metavar = param.metavar or ""
    return params


class BareFlagCommand(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_types(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        # The one class every command runs through: a database failure mid-command is one
        # line here, whichever statement of the command met it.
        from memstrata.cli.db_failure import database_failures

        with database_failures(_command_name(ctx)):
            return super().invoke(ctx)


def _command_name(ctx: Any) -> str:
    """``memstrata db status``, however the program was started (``python -m …``)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["memstrata", *reversed(names)])


class BareFlagGroup(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_types(super().get_params(ctx))


def bare_flags(app: typer.Typer) -> None:
    """Build ``app``'s commands and groups, nested ones included, with the classes above
    (a command or group that names a class of its own keeps it)."""
    if app.info.cls in (None, TyperGroup) or not isinstance(app.info.cls, type):
        app.info.cls = BareFlagGroup
    for command in app.registered_commands:
        if command.cls in (None, TyperCommand):
            command.cls = BareFlagCommand
    for group in app.registered_groups:
        if group.cls in (None, TyperGroup) or not isinstance(group.cls, type):
            group.cls = BareFlagGroup
        if group.typer_instance is not None:
            bare_flags(group.typer_instance)
