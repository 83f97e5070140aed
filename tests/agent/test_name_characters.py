"""Section names and ``update_user`` keys are refused up front when they hold a character no
file can store (a NUL, a lone surrogate: ``text.unstorable_text``) or one that shows as
nothing, reorders the text or is a control (``text.ID_REFUSED``, the ids' rule): the
refusal names the argument and how to fix it, and nothing is written — no file version, no
copy kept aside under the sandbox's conflicts directory, no internal path in the answer."""

from __future__ import annotations

import pytest

from memstrata.agent.arguments import check_key, check_name
from memstrata.agent.tools import MemoryTools
from memstrata.errors import ToolInputError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.state import CONFLICT_DIR
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

USER_MD = "# USER.md\n\n## Profile\n- Name: Ann\n"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("Plans\x00X", "section must not contain NUL characters ('\\x00' at character 6)"),
        ("Plans\ud800", "section is not valid Unicode: it contains a lone surrogate"),
        ("Plans\u202eX", "section must not contain U+202E RIGHT-TO-LEFT OVERRIDE (a bidi"),
        ("\u2066Plans", "section must not contain U+2066 LEFT-TO-RIGHT ISOLATE (a bidi"),
        ("Pla\u200bns", "section must not contain U+200B ZERO WIDTH SPACE (an invisible"),
        ("Plans\x1bX", "section must not contain U+001B (a control character"),
    ],
)
def test_a_section_name_with_a_refused_character_is_refused(name: str, said: str) -> None:
    with pytest.raises(ToolInputError) as refused:
        check_name(name, "section")
    assert str(refused.value).startswith(said), str(refused.value)
    assert str(refused.value).endswith("give the name alone in plain text, such as 'Decisions'")


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("Ci\x00ty", "key must not contain NUL characters ('\\x00' at character 3)"),
        ("a\x1bb\x07", "key must not contain U+001B (a control character"),
        ("City\u202e", "key must not contain U+202E RIGHT-TO-LEFT OVERRIDE"),
    ],
)
def test_a_key_with_a_refused_character_is_refused_not_stripped(key: str, said: str) -> None:
    with pytest.raises(ToolInputError) as refused:
        check_key(key)
    assert str(refused.value).startswith(said), str(refused.value)
    assert str(refused.value).endswith("such as 'Time zone'")


@pytest.mark.parametrize(
    "name",
    [
        "Профиль",  # Cyrillic: a script, not a trick
        "می\u200cخواهم",  # Persian: the non-joiner shapes the word
        "Team \U0001f469\u200d\U0001f4bb",  # a joiner inside an emoji sequence
        "Pläne",
    ],
)
def test_real_names_pass(name: str) -> None:
    assert check_name(name, "section") == name


def _kept_aside(box: LocalDirectorySandbox) -> list[str]:
    folder = box.root / CONFLICT_DIR
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize(
    ("tool", "arguments", "argument"),
    [
        ("record_memory", {"content": "hello", "section": "Plans\x00X"}, "section"),
        (
            "update_long_term_memory",
            {"section": "Plans\x00X", "content": "body", "new_section": True},
            "section",
        ),
        ("update_user", {"section": "Profile", "key": "Ci\x00ty", "content": "Porto"}, "key"),
        ("update_user", {"section": "Pro\x00file", "content": "- City: Porto"}, "section"),
    ],
)
async def test_a_refused_name_writes_nothing(
    tools: MemoryTools,
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    tool: str,
    arguments: dict[str, object],
    argument: str,
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    user_version = await given(sync, FileKind.USER, USER_MD)

    answer = await tools.call(tool, arguments)

    assert answer.failed
    assert answer.startswith(f"error: {argument} must not contain NUL characters"), answer
    assert ".memstrata" not in answer and "conflicts" not in answer
    assert memory(store) == (FULL_MEMORY, version)
    assert user_md(store) == (USER_MD, user_version)
    assert _kept_aside(user_box) == []
