"""OpenAI function-calling schemas of the memory tools, and argument checking against them.

The schemas are built fresh on every call (callers may mutate what they get) and are the
single source of truth for argument names, types and required fields:
:func:`check_arguments` validates a model's call against them before any tool runs.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from memstrata.agent.arguments import (
    DEFAULT_TOOL_TOP_K,
    MAX_ENTRY_CHARS,
    MAX_NAME_CHARS,
    MAX_VALUE_CHARS,
)
from memstrata.agent.json_numbers import integer_arguments
from memstrata.agent.record_edit import DEFAULT_SECTION
from memstrata.errors import ToolInputError
from memstrata.memory.kinds import MAX_CONTENT_BYTES
from memstrata.retrieval.limits import MAX_QUERY_CHARS, MAX_TOOL_TOP_K, SOURCES
from memstrata.sandbox.dirty import decode_tool_arguments

__all__ = ["FILE_LIMIT_RULE", "ToolInputError", "check_arguments", "tool_schemas"]

# A memory file's size limit as the schemas state it. A setting (MEMSTRATA_MAX_CONTENT_BYTES)
# the schemas cannot read, so its default is given as such, and no maxLength: a client
# holding to it would refuse what a server with a larger limit takes. A refusal gives the
# server's own limit.
FILE_LIMIT_RULE = f"at most {MAX_CONTENT_BYTES} bytes of UTF-8 (the default limit)"

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "array": (list, tuple),
    "boolean": (bool,),
}


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def tool_schemas(*, include_search: bool) -> list[dict[str, Any]]:
    # Limits from arguments.py, so a model learns them from the schema, not from a refusal.
    name = {"type": "string", "maxLength": MAX_NAME_CHARS}
    section = {
        **name,
        "description": "Heading text of a '## ' section, e.g. 'Decisions' (the template's are "
        "Decisions, Ongoing, Lessons).",
    }
    refused = "; without it such a call is refused with the name to use."
    new_section = {
        "type": "boolean",
        "description": f"true to create a missing section whose name is close to one the file "
        f"has{refused}",
    }
    new_user_section = {
        **new_section,
        "description": "true to create a missing section whose name is close to one the file "
        f"has, or with a key another section sets{refused}",
    }
    schemas = [
        _function(
            "record_memory",
            "Append a dated entry to MEMORY.md (your long-term memory) under a '## ' section, "
            "creating the section if needed. Use for decisions, commitments, lessons and "
            "anything the user asks you to remember. To correct an entry, pass its text as "
            "'replaces': the old entry is removed; with empty content, it is only removed. An "
            "entry the section already has is not stored twice.",
            {
                "content": {
                    "type": "string",
                    "maxLength": MAX_ENTRY_CHARS,
                    "description": "The entry, one or a few lines (no '- ' and no date: both "
                    "are added). A list of items is stored as one entry per item. Empty, with "
                    "'replaces', to remove that entry.",
                },
                "section": {
                    **section,
                    "description": f"Section to append to (default '{DEFAULT_SECTION}'; with "
                    "'replaces', the replaced entry's section), e.g. 'Decisions', 'Ongoing', "
                    "'Lessons'.",
                },
                "replaces": {
                    "type": "string",
                    "maxLength": MAX_ENTRY_CHARS,
                    "description": "Optional: the text of the existing entry this one corrects "
                    "or supersedes (exactly, or a part only it contains; the date may be left "
                    "out). That entry is removed; with 'section', it must be in that section.",
                },
                "new_section": new_section,
            },
            ["content"],
        ),
        _function(
            "update_long_term_memory",
            "Rewrite MEMORY.md: with 'section', replace that '## ' section's body (created if "
            "missing), which is refused if that would remove an entry or a paragraph unless "
            "replace_section=true. Replacing the whole file needs whole_file=true instead of "
            "section. To correct or remove one entry, prefer record_memory with 'replaces'.",
            {
                "content": {
                    "type": "string",
                    "description": "The section's new body, without its '## ' heading (or, "
                    f"with whole_file, the new file). MEMORY.md holds {FILE_LIMIT_RULE}.",
                },
                "section": section,
                "whole_file": {
                    "type": "boolean",
                    "description": "true (and no section) to replace the whole of MEMORY.md; "
                    "everything not in content is lost (a paragraph only with "
                    "replace_section=true).",
                },
                "new_section": new_section,
                "replace_section": {
                    "type": "boolean",
                    "description": "With section: true to replace the body even though that "
                    "removes entries or paragraphs of the section; with whole_file, paragraphs "
                    "of the file (the answer lists them).",
                },
            },
            ["content"],
        ),
        _function(
            "update_user",
            "Update USER.md (facts about the user): with 'key', set the '- key: value' line in "
            "the section (added if missing); without it, replace the section's body, which "
            "is refused if that would remove an entry unless replace_section=true.",
            {
                "section": {**section, "description": "e.g. 'Profile', 'Work', 'Preferences'."},
                "key": {
                    **name,
                    "pattern": "^[^:]*$",
                    "description": "The fact's name alone, without ':', e.g. 'Time zone'. "
                    "Optional.",
                },
                "content": {
                    "type": "string",
                    "description": f"With key: the value, one line of at most {MAX_VALUE_CHARS} "
                    "characters. Without key: the section's new body, without its heading. "
                    f"USER.md holds {FILE_LIMIT_RULE}.",
                },
                "replace_section": {
                    "type": "boolean",
                    "description": "Without key: true to replace the body even though that "
                    "removes '- key: value' facts.",
                },
                "new_section": new_user_section,
            },
            ["section", "content"],
        ),
    ]
    if include_search:
        schemas.append(
            _function(
                "memory_search",
                "Search the user's memory files and past conversations. Use it before answering "
                "questions about the past.",
                {
                    "query": {
                        "type": "string",
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "What to look for.",
                    },
                    "top_k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TOOL_TOP_K,
                        "description": f"How many results (default {DEFAULT_TOOL_TOP_K}).",
                    },
                    "sources": {
                        "type": "array",
                        "items": {"type": "string", "enum": list(SOURCES)},
                        "minItems": 1,  # [] is refused: leave sources out to search all
                        "description": "Limit to memory files, conversations and/or notes.",
                    },
                },
                ["query"],
            )
        )
    return schemas


def without_null_optionals(
    arguments: Mapping[str, object], optional: Container[str]
) -> dict[str, object]:
    """``arguments`` without the optional ones sent as null: clients fill unset fields with
    null, and the tool's default must then apply (record_memory's section is 'Notes', not
    an error). A null for a required argument stays, for the check to refuse."""
    return {k: v for k, v in arguments.items() if v is not None or k not in optional}


def check_arguments(name: str, arguments: object) -> dict[str, object]:
    """Decode and check a call of tool ``name`` against its schema; returns the kwargs, an
    integer argument sent as an integral float an int (:mod:`memstrata.agent.json_numbers`).
    Anything but a JSON object (a mapping, its JSON text, or ``None`` for no arguments)
    is a ``ToolInputError``, as every other bad call is."""
    schema = next(
        s["function"] for s in tool_schemas(include_search=True) if s["function"]["name"] == name
    )
    parameters = schema["parameters"]
    kwargs = decode_tool_arguments(arguments)
    unknown = sorted(set(kwargs) - set(parameters["properties"]))
    if unknown:
        allowed = ", ".join(parameters["properties"])
        raise ToolInputError(f"unknown argument(s) {', '.join(unknown)}; {name} takes {allowed}")
    missing = [key for key in parameters["required"] if key not in kwargs]
    if missing:
        raise ToolInputError(f"missing required argument(s): {', '.join(missing)}")
    optional = set(parameters["properties"]) - set(parameters["required"])
    # 5.0 is an integer, as JSON Schema and MCP read one; 5.5, true and "5" are refused.
    kwargs = integer_arguments(without_null_optionals(kwargs, optional), parameters)
    for key, value in kwargs.items():
        expected = parameters["properties"][key]["type"]
        # JSON true is no integer here, nor 1 a boolean (bool is an int subclass).
        if isinstance(value, bool) != (expected == "boolean") or not isinstance(
            value, _JSON_TYPES[expected]
        ):
            raise ToolInputError(f"{key} must be a JSON {expected}")
    return kwargs
