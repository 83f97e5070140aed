"""MADial-Bench (Chinese): which memory events does the dialogue so far call up?

The folder holds the benchmark's two JSON-lines files: ``*memory*.json`` (one object per
line, ``{"<id>": {"time", "event", "user-id", ...}}``) and ``*dialogue*.json`` (``dialogue``
lines, ``test-turn``, ``relevant-id``, ``user-id``); beside the other settings' files of the
benchmark's own folder (``…-dialogue-setting2.json``), the one named ``…-dialogue.json``.
Each user's events are indexed as rounds of their own (the event text, dated by the event's
``time``, id = the event id); the query is the dialogue up to its first test turn (the
assistant's line that should use a memory); "now" is the day after the user's latest event.
Score = share of the ``relevant-id`` events among the first k events found.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstrata.bench.harness import Case, Dataset, Question, balanced
from memstrata.retrieval.rounds import Round

_SPEAKER = re.compile(r'^<([^>]+)>:\s*"?(.*?)"?\s*$', re.DOTALL)


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _one(folder: Path, kind: str) -> Path:
    exact = sorted(folder.glob(f"*{kind}.json"))
    found = exact if len(exact) == 1 else sorted(folder.glob(f"*{kind}*.json"))
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise ValueError(
            f"{folder}: expected one file matching *{kind}*.json (or one *{kind}.json among "
            f"them), found {names}; pass the folder holding the benchmark's dialogue and "
            "memory files"
        )
    return found[0]


def dialogue_query(lines: list[str], test_turn: int) -> str:
    """The dialogue before ``test_turn`` as ``speaker: text`` lines (markers dropped)."""
    out = []
    for raw in lines[:test_turn]:
        m = _SPEAKER.match(raw.strip())
        if m:
            out.append(f"{m.group(1)}: {m.group(2)}")
    return "\n".join(out)


def madial_dataset(folder: Path, limit: int | None = None) -> Dataset:
    events: dict[str, dict[str, Any]] = {}
    for obj in _lines(_one(folder, "memory")):
        events.update(obj)
    dialogues = balanced(_lines(_one(folder, "dialogue")), lambda d: "all", limit)
    cases = []
    for user in sorted({str(e["user-id"]) for e in events.values()}):
        mine = {eid: e for eid, e in events.items() if str(e["user-id"]) == user}
        rounds = [
            Round(
                f"event-{eid}",
                0,
                e["event"],
                "",
                datetime.strptime(e["time"], "%Y-%m-%d").replace(tzinfo=UTC),
                [eid],
            )
            for eid, e in mine.items()
        ]
        now = max(r.timestamp for r in rounds if r.timestamp) + timedelta(days=1)
        questions = [
            Question(
                dialogue_query(d["dialogue"], int(d["test-turn"][0])),
                tuple(str(i) for i in d["relevant-id"]),
                now,
            )
            for d in dialogues
            if str(d["user-id"]) == user
        ]
        if questions:
            cases.append(Case(f"madial-{user}", rounds, questions))
    return Dataset("madial", cases, unit=lambda event: event, depth=10, chinese=True)
