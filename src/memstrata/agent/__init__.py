"""Agent-facing pieces: tools, the system-prompt builder, the agent pool."""
