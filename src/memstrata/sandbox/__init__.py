"""Sandboxes: the agent's workspace, where the memory files are mirrored for the agent."""

from memstrata.sandbox.base import (
    DEFAULT_WORKSPACE_PREFIXES,
    Sandbox,
    SandboxProvider,
    Undecodable,
    check_agent_write,
    decode_text,
    normalise_sandbox_path,
    root_memory_file,
)
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider

__all__ = [
    "DEFAULT_WORKSPACE_PREFIXES",
    "LocalDirectorySandbox",
    "LocalSandboxProvider",
    "Sandbox",
    "SandboxProvider",
    "Undecodable",
    "check_agent_write",
    "decode_text",
    "normalise_sandbox_path",
    "root_memory_file",
    "safe_dir_name",
]
