"""The packaged AGENTS.md template as the in-process (sandbox) agent reads it: in its
workspace and at the head of its system prompt. It told every agent to read the three
memory files at the start of each session, files the prompt already holds (three wasted
tool calls a session); it now says to read one only where the prompt left part of it out,
and every tool it names is one this host has."""

from __future__ import annotations

import re

from memstrata.agent.schemas import tool_schemas
from memstrata.memory.templates import TemplateSet, default_template_dir

# The platform's own file tools, which GuardedFileTools wraps (docs/AGENT_TOOLS.md).
PLATFORM_FILE_TOOLS = {"write_file", "edit_file"}


def test_it_says_the_files_are_in_the_prompt_and_when_to_read_one() -> None:
    text = " ".join(TemplateSet(default_template_dir()).agents_md().split())
    assert "Read them at the start of every session" not in text
    assert "system prompt holds their text, so do not read them when a session starts" in text
    assert "read one only where the prompt says part of it was left out" in text


def test_every_tool_it_names_is_the_sandbox_agents() -> None:
    text = TemplateSet(default_template_dir()).agents_md()
    named = set(re.findall(r"`([a-z]+(?:_[a-z]+)+)`", text))
    memory_tools = {s["function"]["name"] for s in tool_schemas(include_search=True)}
    assert named == memory_tools | PLATFORM_FILE_TOOLS
    assert "memory_read" not in text and "memory_write" not in text  # MCP's, not this host's
