"""What leads the ``memory_context`` prompt in place of the platform's AGENTS.md.

AGENTS.md is the platform's rules for the agents it runs in a workspace (a sandbox holding
the memory files, the platform's file tools): "your workspace root holds your memory",
``write_file`` / ``edit_file``. An MCP client has neither. In a coding client its working
directory is the user's repository, where those words sent a model to look for MEMORY.md,
or to create one; and such clients read an AGENTS.md of that repository as the project's
own rules, which a section of that name here would pose as. So the prompt an MCP client
gets leads with this guide instead: the files that follow, where they are not, and the
tools of this server that read and change them.
"""

from __future__ import annotations

MCP_GUIDE = (
    "Your memory of this user, kept by the memstrata MCP server: SOUL.md (who you are with "
    "them), USER.md (who they are) and MEMORY.md (your long-term notes) follow, each "
    "between <file> tags. They are not files of your working directory: never look for, "
    "create or edit them there. Read one with memory_read only where the text says part "
    "of it was left out. Change them with record_memory, update_user or "
    "update_long_term_memory; memory_search finds past conversations and what was left out."
)
