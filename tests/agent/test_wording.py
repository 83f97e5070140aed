"""One wording for the memory tools' answers (``memstrata.agent.wording``): the modules that
word answers take it from there, and none of them imports another for it, so the entry
tools, the rewrite's report and MCP ``memory_write``'s guard cannot drift apart or import
in a cycle."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

WORDING = "memstrata.agent.wording"
# The modules that word answers, and the helpers each once defined for itself.
USERS = (
    "memstrata.agent.edits",
    "memstrata.agent.removals",
    "memstrata.agent.rewrite_guard",
    "memstrata.agent.file_part",
    "memstrata.mcp.file_tools",
)
HELPERS = {"_listed", "_noun", "_count", "quoted", "quoted_whole", "is_key", "MAX_LISTED"}


def _tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))


def _imported(tree: ast.Module) -> set[str]:
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def _defined(tree: ast.Module) -> set[str]:
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("module", USERS)
def test_the_answers_wording_is_defined_once(module: str) -> None:
    assert not _defined(_tree(module)) & HELPERS


def test_the_wording_module_is_a_leaf_and_no_import_waits_in_a_function() -> None:
    assert not _imported(_tree(WORDING)) & set(USERS)
    assert "memstrata.agent.edits" not in _imported(_tree("memstrata.agent.removals"))
    for module in USERS:
        tree = _tree(module)
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        inner = [i for f in functions for i in ast.walk(f) if isinstance(i, ast.ImportFrom)]
        assert not inner, (module, [i.module for i in inner])


def test_lists_and_counts_read_as_before() -> None:
    from memstrata.agent.wording import MAX_LISTED, counted, listed

    names = [f"S{i}" for i in range(MAX_LISTED + 1)]
    assert listed(names[:2]) == "S0, S1"
    assert listed(tuple(names)) == ", ".join(names[:MAX_LISTED]) + ", …"
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(3, "entry", "entries") == "3 entries"
    assert counted(2, "section") == "2 sections"
