"""CPU of one system-prompt build on hostile 256 KB files that must be cut.

The prompt's cut binary-searches a prefix of a file over its budget; each prefix tried
needs to know whether it ends inside a fence or an HTML block (to close it before the
truncation marker). Files made of lines the Markdown reader finds costly (``<`` lines,
nested ``> -`` markers) with one fence in them are the worst case. For every shape, the
median and the largest CPU time (``process_time``) of ``--runs`` builds of a SOUL.md with
``count_tokens`` and a budget of ``--fraction`` of what the file counts, beside one
``markdown_doc.parse`` and one ``count_tokens`` of the file (the floor a build cannot go
under: it reads and counts the file once). Files that are one line (prose, mixed scripts,
one letter repeated, ``<file`` tags the prompt escapes) are the worst case for the count:
every prefix tried ends in that line. ``--only`` times the shapes whose name holds it.

    .venv/bin/python benchmarks/prompt_hostile.py --fraction 0.9 --runs 5
    .venv/bin/python benchmarks/prompt_hostile.py --runs 5 --only "one line"

Run it with ``PYTHONPATH`` at another checkout's ``src`` to time that code on the same
shapes (the "before" column of docs/BENCHMARKS.md, "Prompt cut").
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from memstrata.agent import markdown_doc
from memstrata.agent.prompt import build_system_prompt
from memstrata.memory.kinds import MAX_CONTENT_BYTES
from memstrata.retrieval.tokenize import count_tokens

SIZE = MAX_CONTENT_BYTES - 200  # under the largest file a user may store


def with_fence(text: str, where: str) -> str:
    """``text`` with a line of ```` ``` ```` near its start, middle or end."""
    lines = text.split("\n")
    at = {"start": 1, "middle": len(lines) // 2, "end": len(lines) - 2}[where]
    lines.insert(at, "```")
    return "\n".join(lines)


def shapes() -> dict[str, str]:
    """The files timed, each cut to ``SIZE`` bytes of UTF-8."""
    out: dict[str, str] = {}
    bodies = {
        "< lines": "<\n" * (SIZE // 2),
        "short '> - ' lines": "> - \n" * (SIZE // 4),
        "'> - ' x 8 lines": ("> - " * 8 + "a\n") * (SIZE // 34),
    }
    for name, body in bodies.items():
        for where in ("start", "middle", "end"):
            out[f"{name}, fence at {where}"] = with_fence(body, where)
    out["fence left open in a list item"] = "- a\n  ```\n" + "  <\n" * (SIZE // 4)
    out["one line of nested markers, a fence"] = "- " * (SIZE // 2 - 10) + "```x\n<"
    out["prose"] = "Some words of prose here.\n" * (SIZE // 26)
    one_line = {
        "prose": "Some words of prose here, and more. ",
        "mixed scripts": "记住：用户喜欢简短的回答 😀👍 नमस्ते दुनिया, café déjà vu, x = 1; ",
        "one letter (é)": "é",
        "one letter (क)": "क",
        "<file tags": "<file name=x> </file> ",
    }
    for name, unit in one_line.items():
        out[f"one line: {name}"] = unit * (SIZE // len(unit.encode()) + 1)
    return {name: _cut(text) for name, text in out.items()}


def _cut(text: str) -> str:
    """``text`` cut to ``SIZE`` bytes, at a character's start."""
    return text.encode()[:SIZE].decode(errors="ignore")


def cpu(action: Callable[[], object]) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fraction", type=float, default=0.9, help="budget ÷ the file's count")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default="", help="time only the shapes whose name holds it")
    args = parser.parse_args()
    print("shape | build median s | build max s | one parse s | one count s")
    for name, text in shapes().items():
        if args.only not in name:
            continue
        # The memory part of the prompt is 15 % of the limit (the spec's budget).
        limit = int(count_tokens(text) * args.fraction / 0.15)

        def build(text: str = text, limit: int = limit, name: str = name) -> object:
            result = build_system_prompt(
                agents_md="", soul=text, user="", memory="", token_limit=limit, count=count_tokens
            )
            if not result.truncated:
                raise SystemExit(f"{name}: not cut at fraction {args.fraction}; nothing timed")
            return result

        builds = [cpu(build) for _ in range(args.runs)]
        parse = statistics.median(cpu(lambda t=text: markdown_doc.parse(t)) for _ in range(3))
        counted = statistics.median(cpu(lambda t=text: count_tokens(t)) for _ in range(3))
        print(
            f"{name} | {statistics.median(builds):.3f} | {max(builds):.3f} | {parse:.3f} | "
            f"{counted:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
