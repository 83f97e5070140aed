"""``record_memory``'s edit of MEMORY.md (:class:`AppendEntry`), by the rules and the
contract of :mod:`memstrata.agent.edits`."""

from __future__ import annotations

from datetime import date

from memstrata.agent import entries, markdown_doc, model_markup, sections
from memstrata.agent.answers import ToolAnswer
from memstrata.agent.edits import Edit, NothingToWrite
from memstrata.agent.markdown_doc import Doc, Section
from memstrata.agent.wording import MAX_LISTED, PREVIEW_CHARS, counted, quoted, quoted_whole
from memstrata.memory.kinds import FileKind
from memstrata.text import shortened

DEFAULT_SECTION = "Notes"  # record_memory's section when the model names none


class AppendEntry(Edit):
    """``record_memory``: dated entries appended to a section of MEMORY.md, one per item
    of a list, without the marker and date a model typed (:mod:`model_markup`)."""

    def __init__(
        self,
        content: str,
        section: str | None,
        day: date,
        replaces: str | None,
        *,
        new_section: bool = False,
    ):
        super().__init__(FileKind.MEMORY, new_section=new_section)
        # No content (with replaces, tools.record_memory): the call only removes an entry.
        found = (
            [] if not content.strip() else model_markup.new_entries(content) or [(None, content)]
        )
        dated = [model_markup.entry_date(when, text, day) for when, text in found]
        bullets = [sections.dated_bullet(text, when) for when, text, _ in dated]
        keys = [_bullet_key(bullet) for bullet in bullets]
        # An item listed twice is stored once, as a second call with it would be.
        once = [i for i in range(len(bullets)) if keys[i] not in keys[:i]]
        self.bullets = [bullets[i] for i in once]
        self.name = section
        self.replaces = replaces
        self.day = day
        # The typed dates set aside (each entry so dated is dated today instead).
        self.set_aside = [aside for i in once if (aside := dated[i][2]) is not None]

    def apply(self, text: str) -> str:
        doc = markdown_doc.parse(text)
        found = entries.entries(doc)
        # No entry holds a fence left open (its end ends one), so removing it removes no
        # line after it.
        old = [] if self.replaces is None else self._superseded(doc, found, self.replaces)
        if not self.bullets:
            return self._removed(doc, old)
        name = self.name or (old[0].section if old else None) or DEFAULT_SECTION
        title = self.section(doc, name, named=self.name is not None)
        span = sections.find_section(doc, name)
        others = [e for e in found if e not in old]
        had = [entries.same_entry(others, span, bullet) for bullet in self.bullets]
        fresh = [bullet for bullet, same in zip(self.bullets, had, strict=True) if same is None]
        there = [same for same in had if same is not None]
        kept = entries.without(doc.lines, old)
        # The date of the one entry it already has (of several, no one date is "the").
        when = "" if len(there) != 1 or there[0].date is None else f" ({there[0].date})"
        if not fresh and not old:
            what = "this entry" if len(there) == 1 else f"these {len(there)} entries"
            reply = f"No change: MEMORY.md already has {what} under ## {title}{when}."
            raise NothingToWrite(ToolAnswer(reply))
        removed = f" and removed the entry {quoted_whole(old[0])}" if old else ""
        if len(old) > 1:
            removed += f" ({len(old)} identical copies)"
        if not fresh:  # the new entries are there already: only the old one goes
            what = "the new one" if len(there) == 1 else "the new ones"
            self.done = f"Removed the entry {quoted_whole(old[0])} from MEMORY.md; ## {title} "
            self.done += f"already has {what}{when}"
            return "\n".join(kept)
        count = "" if len(self.bullets) == 1 else f"{counted(len(fresh), 'entry', 'entries')} "
        skipped = ""
        if there:
            listed = "; ".join(quoted(e) for e in there[:MAX_LISTED])
            skipped = f", not the {len(there)} it already had ({listed})"
        self.done = f"Recorded {count}in MEMORY.md under ## {title}{removed}{skipped}"
        if self.set_aside:
            self.notes.append(self._dated_today())
        added = "\n".join(fresh)
        return self.closing(doc, sections.append_to_section("\n".join(kept), name, added))

    def _removed(self, doc: Doc, old: list[entries.Entry]) -> str:
        """The file without the entry ``replaces`` named (``_superseded`` found one), and
        the answer naming it whole, with its section."""
        copies = f" ({len(old)} identical copies)" if len(old) > 1 else ""
        where = f" under ## {old[0].section}" if old[0].section else ""
        self.done = f"Removed the entry {quoted_whole(old[0])}{copies} from MEMORY.md{where}"
        return "\n".join(entries.without(doc.lines, old))

    def _dated_today(self) -> str:
        """The answer's one sentence on typed dates that are not their entries'
        (:func:`model_markup.entry_date`), with today's date, for a model that took
        another day for it."""
        moved, total = len(self.set_aside), len(self.bullets)
        if total == 1:
            which = "the entry is"
        elif moved == total:
            which = "the entries are"
        else:
            which = f"{moved} of the entries {'is' if moved == 1 else 'are'}"
        dates = " and ".join(dict.fromkeys(self.set_aside))
        kept = "stays in its text" if moved == 1 else "stay in their text"
        return f"Note: today is {self.day.isoformat()}, so {which} dated today, and {dates} {kept}."

    def _superseded(self, doc: Doc, found: list[entries.Entry], wanted: str) -> list[entries.Entry]:
        # The entries this call adds, where it adds them, are never the one it replaces: a
        # retry of a call that landed would remove what that call added, and add it again.
        target = sections.find_section(doc, self.name) if self.name is not None else None
        new = {_bullet_key(bullet) for bullet in self.bullets}

        def added(entry: entries.Entry) -> bool:
            where = self.name is None or (target is not None and entry.within(target))
            return entry.key in new and where

        candidates = [e for e in found if not added(e)]
        if self.name is not None:  # the section's entries only (the others: _elsewhere)
            inside = [e for e in candidates if target is not None and e.within(target)]
            matched = entries.matching(inside, wanted)
            if not matched and (elsewhere := entries.matching(candidates, wanted)):
                raise self._elsewhere(target, elsewhere)
        else:
            matched = entries.matching(candidates, wanted)
        texts = {e.key for e in matched}
        if len(texts) == 1:
            self._names_the_entry(doc, matched[0], wanted)
            return matched  # one entry, or identical copies of it
        if matched:
            listed = "; ".join(quoted(e) for e in matched[:MAX_LISTED])
            raise self.refuse(
                f"replaces matches {len(matched)} entries of MEMORY.md: {listed}. Quote more "
                "of the one to replace; nothing was written"
            )
        landed = [e for e in found if added(e)]
        if new and new <= {e.key for e in landed}:  # a retry: the call it repeats landed
            when = f" ({landed[0].date})" if landed[0].date else ""
            what = "this" if len(new) == 1 else f"these {len(new)} entries"
            where = f" under ## {landed[0].section}" if landed[0].section else ""
            raise NothingToWrite(
                ToolAnswer(
                    f"No change: MEMORY.md already holds {what}{where}{when}, and no entry "
                    "matches replaces any more."
                )
            )
        close = entries.near(found, wanted)
        hint = f" The closest: {'; '.join(quoted(e) for e in close)}." if close else ""
        raise self.refuse(
            f"replaces matches no entry of MEMORY.md; give the text of the entry to replace "
            f"(its date may be left out); nothing was written.{hint}"
        )

    def _elsewhere(self, target: Section | None, found: list[entries.Entry]) -> NothingToWrite:
        """The refusal of a ``replaces`` that names no entry of the call's section but
        ``found`` in others: a removal or a correction reached into any section, and the
        call named one to say which entry it meant."""
        title = target.title if target is not None else (self.name or "").strip()
        places = list(dict.fromkeys(e.section for e in found))
        where = ", ".join(f"## {place}" if place else "no section" for place in places)
        shown = "; ".join(quoted(e) for e in found[:MAX_LISTED])
        verb = "replace" if self.bullets else "remove"
        if len(places) > 1:
            how = f"Pass the section of the one to {verb}"
        elif not places[0]:
            how = f"Leave section out to {verb} it"
        else:
            how = f"Pass section={places[0]!r} to {verb} it there"
            if self.bullets:
                how += ", or remove it there (empty content) and record the new entry "
                how += f"under ## {title}"
        return self.refuse(
            f"replaces matches no entry under ## {title} of MEMORY.md, but {len(found)} under "
            f"{where}: {shown}. {how}; nothing was written"
        )

    def _names_the_entry(self, doc: Doc, entry: entries.Entry, wanted: str) -> None:
        """Refuse a ``replaces`` that names a line of a list nested in ``entry`` rather
        than the entry (:func:`entries.inner_item`): it would remove the other lines too."""
        if entries.inner_item(doc, entry, wanted) is None:
            return
        first = entries.entry_syntax(entry.first_line)[1]
        raise self.refuse(
            f"replaces names a line inside a longer entry of MEMORY.md, "
            f"{quoted_whole(entry)}, and removing it would remove its other lines too; "
            f"nothing was written. To replace that whole entry, quote its first line "
            f"({shortened(first, PREVIEW_CHARS)!r}) as replaces and send every line to keep "
            "as content (a list is stored as one entry per item)"
        )


def _bullet_key(bullet: str) -> str:
    """A bullet this call writes, as entries compare (:func:`entries.comparable`)."""
    found = entries.entries(markdown_doc.parse(bullet))
    return found[0].key if found else entries.comparable(bullet)
