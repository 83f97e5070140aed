"""A walkthrough's memory files, too large for the prompt's budget: what the prompt's cut
and its floors are tested with, in the library (tests/agent) and through MCP (tests/mcp)."""

from __future__ import annotations

# The template's profile, then 400 lines of projects: about 9,000 tokens, more than the
# whole budget at token_limit 32,000 (4,800).
USER_MD = "# USER.md\n\n## Profile\n- Name: Judy\n\n## Work\n" + "".join(
    f"- Project {i}: a long description of project number {i} with many words\n" for i in range(400)
)
NEWEST = "- 2026-02-01: the newest note, a correction"
# A decision, then 300 routine notes and the newest one, a correction, last.
MEMORY_MD = (
    "# MEMORY.md\n\n## Decisions\n- 2026-01-02: Chose PostgreSQL.\n\n## Notes\n"
    + "".join(f"- 2026-01-{1 + i % 28:02d}: routine note number {i} of many\n" for i in range(300))
    + NEWEST
    + "\n"
)
