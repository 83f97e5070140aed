"""What each memory tool call changes in its file, and what its answer says about it.

An :class:`Edit` is a callable over the file's current text (read under the user's lock):
it returns the new text and leaves the answer's wording in ``done`` and ``notes``, or it
refuses the call by raising :class:`NothingToWrite` with the answer. It may run twice (on
the sandbox copy, then on the DB copy when the sandbox could not be written); the answer
is the last run's. Only what needs the file is decided here; the arguments are checked
before (:mod:`memstrata.agent.arguments`). The rules, as ``docs/AGENT_TOOLS.md`` states
them:

* ``record_memory`` stores one entry per item of a listed content, none its section
  already has (dates aside), and with ``replaces`` removes the one entry it supersedes (of
  ``section``, when the call names one: found only in another, it is refused with where) —
  not one that only a line nested in it names —, quoted whole; a retry whose first call
  landed is no change (:mod:`memstrata.agent.record_edit`);
* ``update_long_term_memory`` without ``section`` replaces the whole file only with
  ``whole_file``; the refusal says what the file holds, and the answer of a replacement
  what it removed, by MCP ``memory_write``'s rule (:mod:`memstrata.agent.removals`).
  ``whole_file`` is the model saying it means to replace the file, so removing most of
  its entries is not refused; removing any of its text outside entries (a paragraph, a
  subheading: ``removals.text_removed``, the section guard's rule) is, unless
  ``replace_section`` too, as ``memory_write`` refuses it unless ``replace_all`` (a
  paragraph still the template's is no such text: ``removals.template_paragraphs``);
* ``update_user`` without ``key`` and ``update_long_term_memory`` with ``section`` replace
  a section's body only if that keeps every entry of the section, as
  :mod:`memstrata.agent.removals` counts them in either file (a fact by its key, any other
  entry by its text), and ``update_user``'s body is not a lone ``Key: value`` line over a
  section of facts, unless ``replace_section``; nor any of the section's other text (a
  paragraph, a subheading: ``removals.text_removed``). The refusal lists what would go,
  and the answer of a replacement what went, in ``whole_file``'s words;
* a section the call names and the file lacks is created, and when the file has other
  sections the answer lists them; unless ``new_section``, one whose name is close to a
  section the file has, or (USER.md) that would get a key another section sets, is
  refused with the name to use; a name the file holds twice is pointed out (the tools
  reach only the first);
* a fence a person left open is never removed with everything after it (a section body
  it opens in is not replaced), and closing it before added lines is noted. A fence
  inside an entry is never left open: the end of the entry ends it (``markdown_doc``).
  So is an HTML block that only its end ends (``<!--`` without ``-->``), which runs on
  as a fence does.
"""

from __future__ import annotations

from collections.abc import Collection

from memstrata.agent import entries, markdown_doc, sections
from memstrata.agent.answers import ToolAnswer, error
from memstrata.agent.arguments import opening_line
from memstrata.agent.markdown_doc import Doc, Section
from memstrata.agent.removals import (
    OUTSIDE_ENTRIES,
    Removal,
    entries_in,
    paragraphs,
    removal,
    said,
    text_removed,
)
from memstrata.agent.wording import PREVIEW_CHARS, counted, is_key, listed
from memstrata.memory.kinds import FileKind
from memstrata.text import shortened

# How the model shrinks or rewrites each file with the tools it has (MEMORY.md's tools
# do not touch USER.md, and the whole-file path differs per file).
_SHORTEN = {
    FileKind.MEMORY: "remove outdated entries first: update_long_term_memory rewrites one "
    "section without them",
    FileKind.USER: "remove outdated facts first: update_user without key (and with "
    "replace_section=true) rewrites one section without them",
}
# How a refused section replacement names the call, and the call that corrects one entry.
_REPLACES = {
    FileKind.MEMORY: "content replaces",
    FileKind.USER: "without key, content replaces",
}
_CORRECT_ONE = {
    FileKind.MEMORY: "correct one entry with record_memory's replaces",
    FileKind.USER: "set one fact with key",
}
_WHOLE_FILE = {
    FileKind.MEMORY: "update_long_term_memory with whole_file=true",
    FileKind.USER: "memory_write (name='user') where you have it, or ask the user",
}


class NothingToWrite(Exception):
    """An edit that writes nothing: ``reply`` is the tool's answer."""

    def __init__(self, reply: ToolAnswer) -> None:
        super().__init__(reply)
        self.reply = reply


def too_large(kind: FileKind, size: int, limit: int) -> ToolAnswer:
    return error(
        f"{kind.filename} would be {size} bytes, over the {limit}-byte limit; {_SHORTEN[kind]}"
    )


class Edit:
    """One call's change of a file of ``kind`` (module doc)."""

    def __init__(self, kind: FileKind, *, new_section: bool = False) -> None:
        self.kind = kind
        self.done = ""
        self.notes: list[str] = []
        # The call's new_section: create a missing section even though its name is close
        # to one the file has, or its keys are set in another section (section()).
        self.new_section = new_section

    def __call__(self, text: str) -> str:
        self.notes = []
        return self.apply(text)

    def apply(self, text: str) -> str:
        raise NotImplementedError

    def answer(self, reply: ToolAnswer) -> ToolAnswer:
        """``reply`` (the sync's answer) with the notes, unless the call failed."""
        if reply.failed or not self.notes:
            return reply
        return ToolAnswer(" ".join([reply, *self.notes]), failed=reply.failed)

    def refuse(self, message: str) -> NothingToWrite:
        return NothingToWrite(error(message))

    def keep_open_block(self, doc: Doc, lines: tuple[int, int], what: str, doing: str) -> None:
        """Refuse to remove ``lines`` (start, end) when a fence or an HTML block of kind 1
        to 5 opened among them never closes (a person's edit; the tools write none): it
        runs to the end of the file, so everything after it — other sections to a person's
        eye — would go too."""
        file, whole_file = self.kind.filename, _WHOLE_FILE[self.kind]
        if lines[1] < len(doc.lines):
            return
        if doc.open_fence is not None and doc.fence_line >= lines[0]:
            raise self.refuse(
                f"{what} runs to the end of {file}: its line {doc.fence_line + 1} opens a "
                f"{doc.open_fence} fence that never closes, so every line after it is code "
                f"inside it, and {doing} would remove them all; nothing was written. Close the "
                f"fence first ({whole_file})"
            )
        if doc.open_html is not None and doc.html_line >= lines[0]:
            raise self.refuse(
                f"{what} runs to the end of {file}: its line {doc.html_line + 1} opens an HTML "
                f"block ({opening_line(doc.bare(doc.html_line))}) that never closes, so every "
                f"line after it is part of it, and {doing} would remove them all; nothing was "
                f"written. Close it first with a line of {doc.open_html} ({whole_file})"
            )

    def closing(self, before: Doc, after: str) -> str:
        """``after``, with a note if it closes a fence or an HTML block ``before`` left
        open (``sections``: lines added after such a block close it first)."""
        file = self.kind.filename
        fence, end = before.open_fence, before.open_html
        if fence is not None and markdown_doc.open_fence(after) is None:
            self.notes.append(
                f"Note: line {before.fence_line + 1} of {file} opens a {fence} fence that "
                f"never closed, so the lines after it read as code; a line of {fence} now "
                "closes it before the new lines."
            )
        if end is not None and markdown_doc.open_html(after) is None:
            opening = opening_line(before.bare(before.html_line))
            self.notes.append(
                f"Note: line {before.html_line + 1} of {file} opens an HTML block ({opening}) "
                f"that never closed, so the lines after it were part of it; a line of {end} "
                "now closes it before the new lines."
            )
        return after

    def section(self, doc: Doc, name: str, *, named: bool = True) -> str:
        """The title of section ``name`` as the file spells it (``name`` if it is new),
        with the notes a new or repeated section calls for. A ``named`` section the file
        lacks, though it has one of a close name, is refused unless ``new_section``: a
        model's slip (``Profil``, ``Decision``) made a second section beside the one it
        meant, and the facts in the two contradicted each other in the prompt."""
        file = self.kind.filename
        spans = sections.find_sections(doc, name)
        if len(spans) > 1:
            title = spans[0].title
            self.notes.append(
                f"Note: {file} has {len(spans)} sections named ## {title}, and these tools "
                f"edit only the first; merge them ({_WHOLE_FILE[self.kind]})."
            )
        if spans:
            return spans[0].title
        titles = sections.section_titles(doc)
        new = name.strip()
        if named and titles:
            close = sections.close_names(name, titles)
            if close and not self.new_section:
                raise self.refuse(
                    f"{file} has no ## {new}; did you mean ## {close[0]}? Pass "
                    f"section={close[0]!r} to use it, or new_section=true to create ## {new} "
                    "beside it; nothing was written"
                )
            self.notes.append(
                f"New section: {file} had no ## {new} (its sections: {listed(titles)})."
            )
        return new

    def keys_elsewhere(self, doc: Doc, name: str, keys: list[str]) -> None:
        """Refuse to add section ``name`` (the file lacks it) with ``keys`` that another
        section has, unless ``new_section``: ``Name`` under a new ``## Personal`` beside
        ``## Profile``'s is two answers to one question in the prompt."""
        if self.new_section or sections.find_section(doc, name) is not None:
            return
        wanted = {sections.fold(key) for key in keys}
        found: dict[str, tuple[str, str]] = {}  # folded key: (title, the key's line)
        for span in doc.sections():
            for _, key, value in sections.key_bullets(doc, span):
                if sections.fold(key) in wanted and is_key(key):
                    found.setdefault(sections.fold(key), (span.title, f"{key}: {value}"))
        if not found:
            return
        file, new = self.kind.filename, name.strip()
        if len(found) == 1:
            ((title, line),) = found.values()
            key = line.split(":", 1)[0]
            raise self.refuse(
                f"{file} has no ## {new}, and {key} is set under ## {title} "
                f"({shortened(line.strip(), PREVIEW_CHARS)!r}); to change it, pass "
                f"section={title!r}. To add ## {new} with a {key} of its own, pass "
                "new_section=true; nothing was written"
            )
        where = [f"{line.split(':', 1)[0]} under ## {title}" for title, line in found.values()]
        raise self.refuse(
            f"{file} has no ## {new}, and other sections set its keys: {listed(where)}; set "
            f"them there (update_user with key), or pass new_section=true to add ## {new} "
            "with keys of its own; nothing was written"
        )


class ReplaceSection(Edit):
    """``update_long_term_memory`` with ``section``, ``update_user`` without ``key``: a
    section's body replaced. ``guard``: refuse to lose an entry or a paragraph of the
    section (module doc)."""

    def __init__(
        self,
        kind: FileKind,
        name: str,
        body: str,
        *,
        guard: bool = False,
        new_section: bool = False,
    ):
        super().__init__(kind, new_section=new_section)
        self.name = name
        self.body = body
        # Not replace_section: refuse a body that removes what the section holds.
        self.guard = guard

    def apply(self, text: str) -> str:
        doc = markdown_doc.parse(text)
        if self.kind is FileKind.USER:
            self.keys_elsewhere(doc, self.name, sections.body_keys(self.body))
        title = self.section(doc, self.name)
        span = sections.find_section(doc, self.name)
        if span is not None:
            self.keep_open_block(
                doc, (span.body_start, span.end), f"## {title}", "replacing its body"
            )
        if self.guard and span is not None and self.kind is FileKind.USER:
            self._check_keyed_line(doc, span, title)
        new = sections.replace_section(text, self.name, self.body)
        removed = removal(text, new)
        prose = () if span is None else text_removed(doc, span, self.body)
        if self.guard and span is not None:
            self._check_kept(doc, span, title, removed, prose)
        self.done = f"Replaced ## {title} in {self.kind.filename}"
        if said_removed := said(removed):
            self.notes.append(said_removed)
        if prose:
            self.notes.append(f"Removed {paragraphs(prose)}.")
        return self.closing(doc, new)

    def _check_kept(
        self, doc: Doc, span: Section, title: str, removed: Removal, prose: tuple[str, ...]
    ) -> None:
        """A body that drops any entry of the section, as :mod:`memstrata.agent.removals`
        counts them (facts by key, any other entry by its text), or any of its other text
        (``prose``: :func:`~memstrata.agent.removals.text_removed`), is refused. A model
        summing up a section, or sending an empty body, removed every entry or paragraph of
        it, and the answer said only "Replaced"."""
        if not removed.entries and not prose:
            return
        lost = []
        if removed.entries:
            total = counted(entries_in(doc, span), "entry", "entries")
            lost.append(f"{len(removed.entries)} of its {total} ({listed(removed.entries)})")
        if prose:
            lost.append(paragraphs(prose))
        correct = f"{_CORRECT_ONE[self.kind]}, " if removed.entries else ""
        raise self.refuse(
            f"{_REPLACES[self.kind]} the whole body of ## {title}, and this one would remove "
            f"{' and '.join(lost)}. Keep those lines in content, {correct}or pass "
            "replace_section=true to remove them; nothing was written"
        )

    def _check_keyed_line(self, doc: Doc, span: Section, title: str) -> None:
        """A lone ``Key: value`` line over a section of facts is refused with the call the
        model meant: ``update_user`` with ``key``."""
        keys = [k for _, k, _ in sections.key_bullets(doc, span) if is_key(k)]
        line = sections.keyed_line(self.body)
        if keys and line is not None:
            raise self.refuse(
                f"content is one 'Key: value' line, and without key it would replace the "
                f"whole body of ## {title} ({listed(keys)}). Did you mean key={line[0]!r}, "
                f"content={line[1]!r}? To replace the body with this line anyway, pass "
                "replace_section=true"
            )


class SetKey(Edit):
    """``update_user`` with ``key``: one ``- key: value`` bullet set."""

    def __init__(self, name: str, key: str, value: str, *, new_section: bool = False):
        super().__init__(FileKind.USER, new_section=new_section)
        self.name = name
        self.key = key
        self.value = value

    def apply(self, text: str) -> str:
        doc = markdown_doc.parse(text)
        self.keys_elsewhere(doc, self.name, [self.key])
        title = self.section(doc, self.name)
        span = sections.find_section(doc, self.name)
        index = None if span is None else sections.find_key(doc, span, self.key)
        spelled = self.key.strip()
        if span is not None and index is not None:
            spelled = next(k for i, k, _ in sections.key_bullets(doc, span) if i == index)
        self.done = f"Set {spelled} under ## {title} in USER.md"
        return self.closing(doc, sections.set_key(text, self.name, self.key, self.value))


class ReplaceFile(Edit):
    """``update_long_term_memory`` without ``section``: the whole file, if ``whole_file``;
    ``guard``: refuse to lose a paragraph of the file (module doc), but for those in
    ``scaffold``, the template's (``removals.template_paragraphs``)."""

    def __init__(
        self,
        content: str,
        *,
        whole_file: bool,
        guard: bool = True,
        scaffold: Collection[str] = (),
    ):
        super().__init__(FileKind.MEMORY)
        self.content = content
        self.whole_file = whole_file
        # Not replace_section: refuse a file that drops text outside entries.
        self.guard = guard
        self.scaffold = scaffold

    def apply(self, text: str) -> str:
        if not self.whole_file:
            doc = markdown_doc.parse(text)
            count = len(entries.entries(doc))
            titles = sections.section_titles(doc)
            shown = f" ({listed(titles)})" if titles else ""
            raise self.refuse(
                f"without section, this would replace the whole of MEMORY.md, which has "
                f"{counted(count, 'entry', 'entries')} in {counted(len(titles), 'section')}"
                f"{shown}; nothing was written. Pass "
                "section='…' to replace one section's body, or whole_file=true to replace the "
                "whole file"
            )
        new = sections.replace_file(text, self.content)
        removed = removal(text, new, prose=True, scaffold=self.scaffold)
        if removed.paragraphs and self.guard:
            raise self.refuse(
                f"whole_file replaces all of MEMORY.md, and this content would remove "
                f"{paragraphs(removed.paragraphs)}, {OUTSIDE_ENTRIES}. Keep them in content, "
                "or pass replace_section=true with whole_file=true to remove them; nothing "
                "was written"
            )
        self.done = "Replaced the whole of MEMORY.md"
        if removed_said := said(removed):
            self.notes.append(removed_said)
        return new
