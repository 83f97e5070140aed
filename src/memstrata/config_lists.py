"""The settings that take a JSON list: an example of each, and the check that a value is a
list at all.

Given anything else (``MEMSTRATA_EMBEDDING_MODELS='{"name": …}'``, one model without its
brackets), pydantic's own answer was a bare "Input should be a valid list", while a value
that is not JSON at all did get an example. The check names what was given and shows the
setting's own example, so the fix can be copied.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationInfo

# One MEMSTRATA_EMBEDDING_MODELS entry, shown with a wrong one (config_model_entries).
EMBEDDING_MODEL_EXAMPLE = (
    '{"name": "multilingual-e5-small", "base_url": "http://127.0.0.1:8808/v1"}'
)
# One example per list setting, as its variable takes it (a test checks that each is
# accepted and that every list setting has one).
LIST_EXAMPLES = {
    "embedding_models": f"[{EMBEDDING_MODEL_EXAMPLE}]",
    "jwt_rotation_secrets": '["the-previous-secret-of-32-characters-or-more"]',
    "jwt_rotation_public_keys": '["/etc/memstrata/previous-key.pem"]',
    "jwt_algorithms": '["RS256", "ES256"]',
    "skill_dirs": '["/srv/skills"]',
    "mcp_allowed_hosts": '["memory.example.com", "127.0.0.1:*"]',
    "mcp_allowed_origins": '["https://app.example.com"]',
}
# The generic example, for a setting missing from the table above.
LIST_EXAMPLE = '["a", "b"]'


def list_example(field: str) -> str:
    return LIST_EXAMPLES.get(field, LIST_EXAMPLE)


def json_kind(value: object) -> str | None:
    """What a value that is not a list is, in JSON's words ("a JSON object"); None for a
    list, or for another collection pydantic reads as one (a tuple or set in Python)."""
    if isinstance(value, Mapping):
        return "a JSON object"
    if isinstance(value, str | bytes):
        return "a JSON string"
    if isinstance(value, bool):  # before int: True is an int too
        return "a JSON boolean"
    if isinstance(value, int | float):
        return "a JSON number"
    if value is None:
        return "JSON null"
    return None


def must_be_list(value: object, info: ValidationInfo) -> object:
    """A ``mode="before"`` field validator for the list settings."""
    kind = json_kind(value)
    if kind is None:
        return value
    hint = "; a single entry goes in brackets too" if isinstance(value, Mapping | str) else ""
    raise ValueError(
        f"must be a JSON list, e.g. '{list_example(info.field_name or '')}'; got {kind}{hint}"
    )
