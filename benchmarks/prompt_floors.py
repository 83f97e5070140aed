"""What each file shows in the memory prompt with and without floors
(``MEMSTRATA_PROMPT_FLOOR_SHARE``), for a user whose USER.md alone is larger than the
budget at common windows.

The user: the packaged AGENTS.md and SOUL.md; a USER.md of about 9,000 tokens (the
template's profile filled in, then a ``## Work`` of 400 project lines); a MEMORY.md of 300
dated entries under the template's three headings, newest last. For each ``token_limit``
and share, one JSON line per build: each file's section tokens (tags and marker included;
0 when left out) and state, MEMORY.md's entries shown, and the CPU time (``process_time``)
of ``--runs`` builds, median and p95.

    .venv/bin/python benchmarks/prompt_floors.py --runs 21
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time

from memstrata.agent.prompt import PromptResult, build_system_prompt
from memstrata.memory.kinds import FileKind
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.retrieval.tokenize import count_tokens

LIMITS = (8_000, 32_000, 128_000)
SHARES = (0.0, 0.125)
NAMES = ("AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md")


def user_md(templates: TemplateSet) -> str:
    profile = templates.load(FileKind.USER).replace("- Name:", "- Name: Judy")
    projects = "".join(
        f"- Project {i}: a long description of project number {i} with many words\n"
        for i in range(400)
    )
    return profile.replace("## Work\n", "## Work\n" + projects, 1)


def memory_md(templates: TemplateSet) -> str:
    text = templates.load(FileKind.MEMORY)
    for heading, count, first in (("Decisions", 60, 0), ("Ongoing", 180, 60), ("Lessons", 60, 240)):
        entries = "".join(
            f"- 2026-{1 + (first + i) // 28 % 12:02d}-{1 + (first + i) % 28:02d}: "
            f"note {first + i} under {heading.lower()}, a routine fact of this user\n"
            for i in range(count)
        )
        text = text.replace(f"## {heading}\n", f"## {heading}\n{entries}", 1)
    return text


def sections(result: PromptResult) -> dict[str, int]:
    """Each file's section tokens in ``result`` (0 when left out)."""
    found = {}
    for name in NAMES:
        match = re.search(rf'<file name="{re.escape(name)}">\n.*?\n</file>', result.text, re.S)
        found[name] = 0 if match is None else count_tokens(match.group(0))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    templates = TemplateSet(default_template_dir())
    files = {
        "agents_md": templates.agents_md(),
        "soul": templates.load(FileKind.SOUL),
        "user": user_md(templates),
        "memory": memory_md(templates),
    }
    whole = {
        name: count_tokens(text.strip()) for name, text in zip(NAMES, files.values(), strict=True)
    }
    print(json.dumps({"files_tokens": whole}))
    for limit in LIMITS:
        for share in SHARES:
            times, result = [], None
            for _ in range(args.runs):
                started = time.process_time()
                result = build_system_prompt(
                    **files, token_limit=limit, count=count_tokens, floor_share=share
                )
                times.append((time.process_time() - started) * 1000)
            assert result is not None
            memory = result.text.split('<file name="MEMORY.md">', 1)[1:]
            # The dated entries it shows (the template's intro paragraphs are entries too).
            shown_entries = len(re.findall(r"^- 2026-", memory[0], re.M)) if memory else 0
            print(
                json.dumps(
                    {
                        "token_limit": limit,
                        "share": share,
                        "budget": result.budget,
                        "tokens": result.tokens,
                        "sections": sections(result),
                        "truncated": result.truncated,
                        "dropped": result.dropped,
                        "memory_entries_shown": shown_entries,
                        "cpu_ms_p50": round(statistics.median(times), 2),
                        "cpu_ms_p95": round(statistics.quantiles(times, n=20)[-1], 2),
                    }
                )
            )


if __name__ == "__main__":
    main()
