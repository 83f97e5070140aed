"""What the library's refusals say: every surface (HTTP, MCP, CLI) shows these words, so
they use the reader's terms (USER.md, not ``user_md``; "left out", not Python's None),
say what was wrong and how to fix it, and cut what they echo."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memstrata.agent.arguments import check_text as tool_text
from memstrata.config import Settings
from memstrata.errors import (
    InvalidContentError,
    InvalidSettingError,
    ToolInputError,
    UnknownSkillError,
    VersionConflictError,
    file_name,
)
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import check_expected_version, validate_content
from memstrata.retrieval.rounds import check_text as round_text
from memstrata.retrieval.search_input import check_query
from memstrata.retrieval.session_ids import SESSION_ID_HINT, check_session_id
from memstrata.runtime import Memstrata
from memstrata.skills.service import unknown_skill_message
from memstrata.text import unstorable_text

# -- expected_version ----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [(2**40, "1099511627776"), ("1", "'1'"), (-1, "-1")])
def test_a_bad_expected_version_says_what_one_is_without_python_words(
    value: object, shown: str
) -> None:
    with pytest.raises(InvalidContentError) as info:
        check_expected_version(value)
    assert str(info.value) == (
        "expected_version must be an integer from 0 (the file must not exist yet) to "
        f"2147483647, or left out; got {shown}"
    )


# -- version conflicts -----------------------------------------------------------------------


def test_a_version_conflict_names_the_file_and_the_version_to_apply_the_change_to() -> None:
    assert str(VersionConflictError("u", "user_md", 6, 1)) == (
        "version conflict on USER.md: expected version 6, found version 1; read it again "
        "and apply your change to version 1"
    )
    assert str(VersionConflictError("u", "memory_md", 2, None)) == (
        "version conflict on MEMORY.md: expected version 2, found no file yet; apply your "
        "change to an empty file, with expected version 0"
    )
    lost = VersionConflictError("u", "soul_md", 3, 4)
    assert lost.file_type == "soul_md"  # the attribute keeps the store's name


def test_a_stale_library_write_is_told_in_the_files_name(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()
    mem.store.provision_default_files("vic")
    with pytest.raises(VersionConflictError) as info:
        mem.store.upsert_memory_file("vic", "user", "x", expected_version=6)
    assert str(info.value) == (
        "version conflict on USER.md: expected version 6, found version 1; read it again "
        "and apply your change to version 1"
    )


# -- unknown skills --------------------------------------------------------------------------


def test_an_unknown_skill_lists_the_installed_ones(open_runtime: Callable[..., Memstrata]) -> None:
    mem = open_runtime()
    with pytest.raises(UnknownSkillError) as info:
        mem.skills.set_enabled("vic", "nosuch", True)
    assert str(info.value) == (
        "no skill named 'nosuch'; installed skills: code_interpreter, file_manager, "
        "memory_search, web_search"
    )


def test_a_long_unknown_skill_name_is_cut(open_runtime: Callable[..., Memstrata]) -> None:
    mem = open_runtime()
    with pytest.raises(UnknownSkillError) as info:
        mem.skills.set_enabled("vic", "x" * 5000, True)
    said = str(info.value)
    assert said.startswith(f"no skill named {'x' * 100 + '…'!r}; installed skills: ")
    assert len(said) < 250, said


# -- session ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "said"),
    [
        ("a/b", "invalid session_id 'a/b': character 2 is '/' (a path separator)"),
        ("a\\b", "invalid session_id 'a\\\\b': character 2 is '\\' (a path separator)"),
        ("", "session_id is empty"),
        ("   ", "invalid session_id '   ': it is blank"),
        (5, "session_id must be a string, got int"),
        (
            "s" * 201,
            f"invalid session_id {'s' * 60!r}: it is 201 characters, over the limit of 200",
        ),
        (
            "a\x85b",
            "invalid session_id 'a\\x85b': character 2 is U+0085 (a control character or "
            "line separator)",
        ),
        (
            "\u202eabc",
            "invalid session_id '\\u202eabc': character 1 is U+202E RIGHT-TO-LEFT OVERRIDE "
            "(a bidirectional control, which shows the id and the text after it reordered)",
        ),
        (
            "caf\ufffd",
            "invalid session_id 'caf\ufffd': character 4 is U+FFFD REPLACEMENT CHARACTER (it "
            "stands where text was not valid UTF-8; send the id's own characters)",
        ),
        (
            "a\ud800",
            "invalid session_id 'a\\ud800': character 2 is U+D800 (a lone surrogate, not "
            "valid Unicode)",
        ),
    ],
)
def test_a_refused_session_id_says_why_then_the_short_rule(session_id: object, said: str) -> None:
    with pytest.raises(InvalidContentError) as info:
        check_session_id(session_id)
    assert str(info.value) == f"{said}; {SESSION_ID_HINT}"


def test_the_session_id_rule_is_short_and_gives_no_url_advice() -> None:
    assert SESSION_ID_HINT == (
        "use 1–200 printable characters without '/' or '\\', e.g. 'chat-2026-12-06'"
    )
    with pytest.raises(InvalidContentError) as info:
        check_session_id("caf\ufffd")
    assert "URL" not in str(info.value) and "percent" not in str(info.value)
    assert len(str(info.value)) < 250  # it was 550


# -- queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("", "query is blank: send the words to search for"),
        ("  \n", "query is blank: send the words to search for"),
        ("x" * 40000, "query is 40000 characters; the limit is 4000"),
        (5, "query must be a string, got int"),
    ],
)
def test_a_bad_query_says_what_is_wrong(query: object, said: str) -> None:
    with pytest.raises(InvalidContentError) as info:
        check_query(query)
    assert str(info.value) == said


# -- NUL and lone surrogates: one rule, one wording --------------------------------------------

NUL = "content must not contain NUL characters ('\\x00' at character 2)"
SURROGATE = "content is not valid Unicode: it contains a lone surrogate ('\\ud800' at character 3)"


@pytest.mark.parametrize(("text", "said"), [("a\x00b", NUL), ("ab\ud800", SURROGATE)])
def test_nul_and_lone_surrogates_are_worded_once_for_every_caller(text: str, said: str) -> None:
    """The memory file, a round's text and a tool's argument were three wordings."""
    assert unstorable_text(text, "content") == said
    with pytest.raises(InvalidContentError) as stored:
        validate_content(text, 1000)
    with pytest.raises(InvalidContentError) as round_:
        round_text("content", text)
    with pytest.raises(ToolInputError) as tool:
        tool_text(text, "content")
    assert str(stored.value) == str(round_.value) == str(tool.value) == said


def test_a_query_with_a_lone_surrogate_has_the_same_words() -> None:
    with pytest.raises(InvalidContentError) as info:
        check_query("tea \ud800")
    assert str(info.value) == (
        "query is not valid Unicode: it contains a lone surrogate ('\\ud800' at character 5)"
    )


def test_storable_text_has_no_problem() -> None:
    assert unstorable_text("tea ☕ 👨\u200d👩\u200d👧", "content") is None


# -- settings --------------------------------------------------------------------------------


def test_a_settings_error_has_no_pydantic_link() -> None:
    """pydantic's "For further information visit https://errors.pydantic.dev/…" sends a
    reader to pydantic's docs, not memstrata's."""
    with pytest.raises(InvalidSettingError) as info:
        Settings(migrate_on_start="maybe", max_content_bytes=-1)  # type: ignore[arg-type]
    said = str(info.value)
    assert "errors.pydantic.dev" not in said and "further information" not in said
    assert said.splitlines()[:3] == [
        "invalid settings: MEMSTRATA_MIGRATE_ON_START, MEMSTRATA_MAX_CONTENT_BYTES",
        "2 validation errors for Settings",
        "migrate_on_start",
    ]


def test_the_file_name_rule_names_every_kind_as_the_kinds_do() -> None:
    assert {file_name(k.file_type) for k in FileKind} == {k.filename for k in FileKind}
    assert file_name("notes") == "notes"  # no kind's: as it is


def test_an_unknown_skill_among_many_or_none() -> None:
    many = [f"skill_{n:02}" for n in range(25)]
    assert unknown_skill_message("x", many) == (
        f"no skill named 'x'; installed skills: {', '.join(many[:20])} and 5 more"
    )
    assert unknown_skill_message("x", []) == "no skill named 'x'; no skills are installed"
