"""``memory_search``'s query over MCP (the SDK's in-process client on the real runtime) is
checked by the search's one rule, the REST API's and the library's: the same limit, the
same refusal of a NUL, the same words."""

from __future__ import annotations

import pytest

from memstrata.errors import InvalidContentError
from memstrata.retrieval.limits import MAX_QUERY_CHARS
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused

pytestmark = pytest.mark.anyio


def library_refusal(mem: Memstrata, query: str) -> str:
    with pytest.raises(InvalidContentError) as info:
        mem.search.search("alice", query)
    return str(info.value)


@pytest.mark.parametrize(
    "query",
    ["tea\x00", "  ", "x" * (MAX_QUERY_CHARS + 1), "tea \ud800"],
    ids=["nul", "blank", "too-long", "lone-surrogate"],
)
async def test_a_bad_query_is_refused_as_the_library_refuses_it(
    connect: ClientFactory, mem: Memstrata, query: str
) -> None:
    async with connect("alice") as client:
        said = await refused(client, "memory_search", {"query": query})
    assert said == f"error: {library_refusal(mem, query)}"


async def test_a_nul_in_a_query_has_the_shared_wording(connect: ClientFactory) -> None:
    async with connect("alice") as client:
        said = await refused(client, "memory_search", {"query": "tea\x00"})
    assert said == "error: query must not contain NUL characters ('\\x00' at character 4)"


async def test_a_query_as_long_as_over_http_is_searched(connect: ClientFactory) -> None:
    async with connect("alice") as client:
        await ok(client, "record_memory", {"content": "Plays the cello on Sundays"})
        result = await ok(client, "memory_search", {"query": "cello " * (MAX_QUERY_CHARS // 6)})
        schema = {t.name: t for t in (await client.list_tools()).tools}["memory_search"]
    assert result.structured_content is not None
    assert "cello" in result.structured_content["hits"][0]["text"]
    assert schema.input_schema["properties"]["query"]["maxLength"] == MAX_QUERY_CHARS
