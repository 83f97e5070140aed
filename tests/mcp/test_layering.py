"""The MCP server is a transport beside the REST API, not on top of it: no module of
``memstrata.mcp`` imports a REST router. What both share lies below them (the services,
``memstrata.memory.conflict_refusals`` for the kept-aside copies' refusals) or is the
one error shape (``memstrata.api.errors``)."""

from __future__ import annotations

import ast
from pathlib import Path

import memstrata.mcp

ROUTERS = "memstrata.api.routers"


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_mcp_module_imports_a_rest_router() -> None:
    package = Path(memstrata.mcp.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) > 10  # the package was found
    offending = {
        path.name: sorted(name for name in imported(path) if name.startswith(ROUTERS))
        for path in modules
    }
    assert {name: found for name, found in offending.items() if found} == {}
