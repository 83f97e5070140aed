"""``skills_list`` and ``skill_set``: ``SkillService``, as REST ``/api/config/skills``."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from memstrata.api.schemas import SkillList
from memstrata.errors import UnknownSkillError
from memstrata.mcp.base import Caller, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.tool_args import args_schema, json_text, parse_arguments, result_schema


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skill_name: Annotated[StrictStr, Field(min_length=1)] = Field(
        description="A name from skills_list."
    )
    enabled: StrictBool = Field(description="true to turn the skill on, false to turn it off.")


class _SkillSet(BaseModel):
    skill_name: str
    enabled: bool


async def skills_list(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    parse_arguments(_NoArgs, arguments, "skills_list")
    skills = await anyio.to_thread.run_sync(caller.mem.skills.list_for_user, caller.user_id)
    data = {
        "skills": [
            {
                "name": s.name,
                "description": s.description,
                "description_en": s.description_en,
                "category": s.category,
                "enabled": s.enabled,
            }
            for s in skills
        ]
    }
    return ToolOutput(json_text(data), data)


async def skill_set(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = parse_arguments(_SkillArgs, arguments, "skill_set")
    toggle = partial(caller.mem.skills.set_enabled, caller.user_id, args.skill_name, args.enabled)
    try:
        skill = await anyio.to_thread.run_sync(toggle)
    except UnknownSkillError as exc:
        raise ToolError(f"{exc} (over MCP: skills_list)") from exc
    data = {"skill_name": skill.name, "enabled": skill.enabled}
    state = "on" if skill.enabled else "off"
    return ToolOutput(f"Skill {skill.name} is {state}.", data)


SKILL_TOOLS = (
    McpTool(
        "skills_list",
        "List the installed skills and whether each is on for this user.",
        args_schema(_NoArgs),
        hints(read_only=True, idempotent=True),
        skills_list,
        result_schema(SkillList),
    ),
    McpTool(
        "skill_set",
        "Turn one skill on or off for this user.",
        args_schema(_SkillArgs),
        hints(read_only=False, destructive=False, idempotent=True),
        skill_set,
        result_schema(_SkillSet),
    ),
)
