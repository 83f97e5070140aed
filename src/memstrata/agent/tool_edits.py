"""The :class:`~memstrata.agent.edits.Edit` each memory tool call asks for, built from its
arguments once they are checked (:mod:`memstrata.agent.arguments`), or the
:class:`~memstrata.errors.ToolInputError` that the call's answer words: arguments that
contradict each other (``section`` with ``whole_file``, ``key`` with ``replace_section``,
``replace_section`` with neither ``section`` nor ``whole_file``) are refused here, before
any file is read. :class:`~memstrata.agent.tools.MemoryTools` runs the edit under the
user's lock."""

from __future__ import annotations

from datetime import date

from memstrata.agent.arguments import (
    MAX_ENTRY_CHARS,
    check_body,
    check_entry,
    check_key,
    check_name,
    check_text,
    check_value,
    check_whole_file,
)
from memstrata.agent.edits import Edit, ReplaceFile, ReplaceSection, SetKey
from memstrata.agent.record_edit import AppendEntry
from memstrata.agent.removals import template_paragraphs
from memstrata.errors import ToolInputError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore

_SECTION_OR_FILE = (
    "pass section to replace one section's body, or whole_file=true without section to "
    "replace the whole file, not both"
)
_EMPTY_ENTRY = (
    "content must not be empty; to remove an entry, pass its text as replaces with empty content"
)
_SECTION_FLAG = (
    "replace_section goes with section or whole_file (it removes what the replaced text "
    "held); to replace one section's body, pass section; to replace the whole file, "
    "whole_file=true"
)
_KEY_OR_SECTION = (
    "pass key to set one '- key: value' line, or replace_section=true without key to "
    "replace the section's whole body, not both"
)


def record_memory_edit(
    content: str, section: str | None, replaces: str | None, new_section: bool, day: date
) -> Edit:
    """``record_memory``'s edit, its arguments checked."""
    # Empty content with replaces removes that entry: "Remove what is no longer true"
    # had no call of its own, and an agent's empty record_memory was refused bare.
    remove = replaces is not None and isinstance(content, str) and not content.strip()
    if not remove and isinstance(content, str) and not content.strip():
        raise ToolInputError(_EMPTY_ENTRY)
    text = "" if remove else check_entry(content)
    name = None if section is None else check_name(section, "section")
    old = None if replaces is None else check_text(replaces, "replaces", MAX_ENTRY_CHARS)
    return AppendEntry(text, name, day, old, new_section=new_section is True)


def long_term_edit(
    content: str,
    section: str | None,
    whole_file: bool,
    new_section: bool = False,
    *,
    replace_section: bool = False,
    store: MemoryStore | None = None,
) -> Edit:
    """``update_long_term_memory``'s edit, its arguments checked; ``store``: the user's,
    whose template paragraphs of MEMORY.md a whole-file rewrite may drop
    (:func:`~memstrata.agent.removals.template_paragraphs`: may read the template file
    and the database)."""
    if section is None:
        if replace_section and whole_file is not True:
            raise ToolInputError(_SECTION_FLAG)
        text = check_whole_file(content, whole_file is True)
        scaffold = frozenset[str]()
        if store is not None and whole_file is True:
            scaffold = template_paragraphs(store, FileKind.MEMORY)
        whole = whole_file is True
        return ReplaceFile(text, whole_file=whole, guard=not replace_section, scaffold=scaffold)
    if whole_file is True:
        raise ToolInputError(_SECTION_OR_FILE)
    name = check_name(section, "section")
    body = check_body(content, name, FileKind.MEMORY.filename)
    guard = not replace_section
    return ReplaceSection(FileKind.MEMORY, name, body, guard=guard, new_section=new_section)


def user_edit(
    content: str, section: str, key: str | None, replace_section: bool, new_section: bool = False
) -> Edit:
    """``update_user``'s edit, its arguments checked."""
    name = check_name(section, "section")
    if key is None:
        body = check_body(content, name, FileKind.USER.filename)
        guard = replace_section is not True
        return ReplaceSection(FileKind.USER, name, body, guard=guard, new_section=new_section)
    if replace_section is True:
        raise ToolInputError(_KEY_OR_SECTION)
    return SetKey(name, check_key(key), check_value(content), new_section=new_section)
