"""The structured log lines a ``memstrata serve`` subprocess wrote to a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def events_in(log: Path, name: str | None = None) -> list[dict[str, Any]]:
    """The JSON log lines in ``log`` so far (all, or those of event ``name``), in order;
    lines that are not JSON objects (a traceback, uvicorn's own) are skipped."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and (name is None or record.get("event") == name):
            found.append(record)
    return found
