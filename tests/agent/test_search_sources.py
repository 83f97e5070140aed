"""``memory_search``'s ``sources`` is refused in the search's own words (the REST API's,
the library's), not with a Python tuple: one rule, one message."""

from __future__ import annotations

import pytest

from memstrata.agent.arguments import search_arguments
from memstrata.errors import InvalidContentError, ToolInputError
from memstrata.retrieval.search_input import check_sources


@pytest.mark.parametrize("sources", [["files"], [], ["memory", "web"], [5]])
def test_bad_sources_are_refused_in_the_searchs_words(sources: list[object]) -> None:
    with pytest.raises(InvalidContentError) as search:
        check_sources(sources)  # type: ignore[arg-type]
    with pytest.raises(ToolInputError) as tool:
        search_arguments("tea", 5, sources)
    assert str(tool.value) == str(search.value)
    assert str(tool.value).startswith(
        "sources must be a non-empty list drawn from memory, conversation, notes; got "
    )
    assert "('memory'" not in str(tool.value)


def test_a_value_that_is_no_list_is_refused_as_what_it_is() -> None:
    with pytest.raises(ToolInputError, match=r"drawn from memory, conversation, notes; got \[5\]"):
        search_arguments("tea", 5, 5)


def test_good_sources_pass() -> None:
    assert search_arguments("tea", 5, ["conversation", "memory"]) == (
        "tea",
        5,
        ["conversation", "memory"],
    )
    assert search_arguments("tea")[2] is None
