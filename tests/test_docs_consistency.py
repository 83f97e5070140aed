"""README.md and docs/*.md against the code they describe: names, paths, schemas, commands
and snippets that drift when one side changes without the other.

Each check reads the docs as a platform engineer would copy from them: a setting named in
a sentence, a route of API.md's table, a command in a code span, a Python block. Most need
no database; the two that run snippets or read ``/metrics`` use the session's PostgreSQL.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import re
import shlex
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient

from memstrata.agent.schemas import tool_schemas
from memstrata.api import create_app
from memstrata.cli import build_app
from memstrata.config import Settings
from memstrata.logs import AUDIT_LOGGER
from memstrata.mcp.tools import TOOLS
from memstrata.runtime import Memstrata

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
SRC = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))
SETTINGS = {f"MEMSTRATA_{name.upper()}": field for name, field in Settings.model_fields.items()}
# Named in the docs, read by no Settings field, on purpose.
NOT_SETTINGS = {
    "MEMSTRATA_LOCOMO": "the LoCoMo path `make bench` reads (benchmarks/test_benchmarks.py)",
    "MEMSTRATA_DATABASE_ULR": "DEPLOY.md's example of a misspelt variable",
}
# Backticked dotted names under memstrata that are logger names, not importable objects.
LOGGER_NAMES = {"memstrata.api.access", AUDIT_LOGGER}


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _blocks(language: str) -> Iterator[tuple[Path, str]]:
    for path in DOCS:
        for block in re.findall(rf"```{language}\n(.*?)```", _text(path), re.S):
            yield path, block


def _expand(base: str, suffix: str, known: set[str]) -> str | None:
    """``MEMSTRATA_EMBEDDING_TIMEOUT_S`` + ``…_TIMEOUT_PER_TEXT_S``: the docs' shorthand for
    a sibling name, which replaces the base's tail from some underscore on."""
    parts = base.split("_")
    for cut in range(len(parts) - 1, 0, -1):
        name = "_".join(parts[:cut]) + suffix
        if name in known:
            return name
    return None


def _named(text: str, prefix: str) -> Iterator[tuple[str, str | None]]:
    """Every ``prefix…`` name in backticks, and each shorthand sibling after one
    (`` `A_B_C` / `_D` ``, `` `A_B`, `…_E` ``) as (base, suffix)."""
    word = rf"{prefix}[A-Za-z0-9_]*[A-Za-z0-9]"
    for name in re.findall(rf"`({word})(?:\{{[^`]*\}})?`", text):
        yield name, None
    sibling = r"`(?:…)?(_[A-Za-z0-9_]*[A-Za-z0-9])`"
    chain = rf"`({word})`((?:\s*(?:/|,|or|and)\s*{sibling})+)"
    for match in re.finditer(chain, text):
        for suffix in re.findall(sibling, match.group(2)):
            yield match.group(1), suffix


def test_every_variable_the_docs_name_is_a_setting() -> None:
    known = set(SETTINGS) | set(NOT_SETTINGS)
    wrong = []
    for path in DOCS:
        for base, suffix in _named(_text(path), "MEMSTRATA_"):
            if suffix is None and base not in known:
                wrong.append(f"{path.name}: {base}")
            elif suffix is not None and _expand(base, suffix, known) is None:
                wrong.append(f"{path.name}: {base} … {suffix}")
    assert not wrong, f"not a MEMSTRATA_* setting: {wrong}"


def _default_tables() -> Iterator[tuple[str, str, str]]:
    """(file, names cell, default cell) of every hand-written table with a default column
    (CONFIGURATION.md is generated, and checked by tests/test_config.py)."""
    for path in DOCS:
        if path.name == "CONFIGURATION.md":
            continue
        in_table = False
        for line in _text(path).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("|") and len(cells) > 2 and cells[1] == "default":
                in_table = True
            elif not line.startswith("|"):
                in_table = False
            elif in_table and cells[0].startswith("`MEMSTRATA_"):
                yield path.name, cells[0], cells[1]


def test_documented_defaults_are_the_settings_defaults() -> None:
    wrong, checked = [], 0
    for doc, names_cell, default_cell in _default_tables():
        names = re.findall(r"`((?:…)?_?[A-Z0-9_]+)`", names_cell)
        values = [v.strip().strip("`") for v in default_cell.split(" / ")]
        assert len(names) == len(values), (doc, names_cell, default_cell)
        for name, value in zip(names, values, strict=True):
            if not name.startswith("MEMSTRATA_"):
                name = _expand(names[0], name.lstrip("…"), set(SETTINGS)) or name
            default = SETTINGS[name].get_default(call_default_factory=True)
            if json.loads(value) != default:
                wrong.append(f"{doc}: {name} documented {value}, default {default!r}")
            checked += 1
    assert checked >= 15  # MCP.md's and RELIABILITY.md's tables
    assert not wrong, wrong


# --- docs/API.md -----------------------------------------------------------------------


def _api_table() -> list[list[str]]:
    text = _text(ROOT / "docs" / "API.md")
    table = text.split("| method | path | auth | body → response |", 1)[1].split("\n\n", 1)[0]
    rows = [re.split(r"(?<!\\)\|", line.strip().strip("|")) for line in table.splitlines()]
    return [[c.strip() for c in row] for row in rows if row[0].strip() not in ("", "---")]


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = Settings(
        environment="test", data_dir=tmp_path_factory.mktemp("openapi"), jwt_secret="x" * 40
    )
    document: dict[str, Any] = create_app(settings).openapi()
    return document


def test_the_api_table_lists_every_route_of_the_openapi_document(
    openapi: dict[str, Any],
) -> None:
    documented = {(row[0], row[1].strip("`")) for row in _api_table()}
    served = {(m.upper(), p) for p, ops in openapi["paths"].items() for m in ops}
    assert documented == served


def _top_level_keys(cell: str) -> set[str]:
    """``{a, b?, c: [{…}], "d": 1}`` → {a, b, c, d}."""
    span = re.search(r"`(\{.*?\})`(?!\})", cell)
    if span is None:
        return set()
    body, depth, piece, pieces = span.group(1)[1:-1], 0, "", []
    for char in body:
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            pieces.append(piece)
            piece = ""
        else:
            piece += char
    keys = (re.match(r'\s*"?([A-Za-z_]+)', p) for p in [*pieces, piece])
    return {k.group(1) for k in keys if k is not None}


def _properties(openapi: dict[str, Any], schema: dict[str, Any] | None) -> set[str]:
    while schema is not None and "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return set(schema.get("properties", {})) if schema else set()


def test_the_api_table_bodies_are_the_schemas(openapi: dict[str, Any]) -> None:
    checked = 0
    for method, path, _auth, bodies in _api_table():
        operation = openapi["paths"][path.strip("`")][method.lower()]
        request, _, response = bodies.partition("→")
        documented = _top_level_keys(request)
        if documented:
            content = operation["requestBody"]["content"]["application/json"]
            assert documented == _properties(openapi, content["schema"]), (method, path)
            checked += 1
        documented = _top_level_keys(response) | set(
            re.findall(r"`([a-z_]+)`", response.partition("(+")[2].partition(")")[0])
        )
        if documented:
            content = operation["responses"]["200"]["content"]["application/json"]
            assert documented == _properties(openapi, content["schema"]), (method, path)
            checked += 1
    assert checked >= 15


def test_every_error_code_is_in_the_api_error_table_and_back() -> None:
    errors = _text(ROOT / "docs" / "API.md").split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in errors.splitlines() if re.match(r"\| \d", line)]
    documented = {code for row in rows for code in re.findall(r"`([a-z_]+)`", row[2])}
    produced = set(re.findall(r'code="([a-z_]+)"', SRC))
    produced |= set(re.findall(r'^\s+\d{3}: "([a-z_]+)",$', SRC, re.M))
    produced.discard("forbidden")  # a status's fallback code; no route answers 403 with it
    assert produced <= documented, f"answered but not in API.md's table: {produced - documented}"
    missing = {code for code in documented if f'"{code}"' not in SRC}
    assert not missing, f"in API.md's table but never answered: {missing}"


# --- agent tools, MCP, the CLI ---------------------------------------------------------


def test_the_agent_tool_schemas_are_the_documented_json() -> None:
    block = re.findall(r"```json\n(.*?)```", _text(ROOT / "docs" / "AGENT_TOOLS.md"), re.S)[-1]
    assert json.loads(block) == tool_schemas(include_search=True)


def test_the_mcp_tool_lists_are_the_servers_tools() -> None:
    served = [tool.name for tool in TOOLS]
    readme = _text(ROOT / "README.md").split("## Use it from an MCP client", 1)[1]
    listed = readme.split("tools ", 1)[1].split(";", 1)[0]
    assert re.findall(r"`(\w+)`", listed) == served
    tools = _text(ROOT / "docs" / "MCP.md").split("\n## Tools\n", 1)[1]
    table = tools.split("| tool | hints | arguments | result |", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"^\| `(\w+)` \|", table, re.M) == served


def test_json_blocks_parse() -> None:
    for path, block in _blocks("json"):
        try:
            json.loads(block)
        except json.JSONDecodeError:  # JSON lines (benchmark records): each line whole
            for line in filter(None, block.splitlines()):
                assert isinstance(json.loads(line), dict), (path.name, line)


def test_python_blocks_compile_and_their_memstrata_imports_resolve() -> None:
    for path, block in _blocks("python"):
        tree = compile(block, path.name, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memstrata"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), (path.name, node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("memstrata"):
                        importlib.import_module(alias.name)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_memstrata_name_the_docs_give_resolves() -> None:
    wrong = []
    for path in DOCS:
        for dotted in re.findall(r"`(memstrata(?:\.[A-Za-z_]\w*)+)", _text(path)):
            if dotted not in LOGGER_NAMES and not _resolves(dotted):
                wrong.append(f"{path.name}: {dotted}")
    assert not wrong, wrong


def _invocations() -> Iterator[tuple[str, str]]:
    """`memstrata …` in code spans and in the shell blocks, placeholders and all."""
    for path in DOCS:
        for span in re.findall(r"`(memstrata [a-z][^`]*)`", _text(path)):
            yield path.name, span
    for path, block in _blocks("sh"):
        for line in block.splitlines():
            for command in re.findall(r"(?:^|[\s(/])(memstrata [a-z][^#)`|\n]*)", line):
                yield path.name, command


def _command_problem(words: list[str], root: Any) -> str | None:
    command, path = root, []
    while hasattr(command, "commands") and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words.pop(0)]
    if hasattr(command, "commands"):
        return f"no command {words[:1]}" if words or not path else None
    options = {o: p for p in command.params if p.param_type_name == "option" for o in p.opts}
    options |= {o: p for p in command.params for o in getattr(p, "secondary_opts", [])}
    arguments = sum(1 for p in command.params if p.param_type_name == "argument")
    given = iter(words)
    positional = 0
    for word in given:
        if word.startswith("-"):
            option = options.get(word.split("=", 1)[0])
            if option is None:
                return f"{' '.join(path)} has no option {word}"
            if not option.is_flag and "=" not in word:
                next(given, None)
        elif word not in ("/", "|"):
            positional += 1
    return f"{' '.join(path)} takes {arguments} argument(s)" if positional > arguments else None


def test_every_command_the_docs_show_parses() -> None:
    root = typer.main.get_command(build_app())
    wrong = []
    for doc, command in _invocations():
        words = shlex.split(re.sub(r"[\[\]]", " ", command).replace("…", "x"))[1:]
        problem = _command_problem(words, root)
        if problem is not None:
            wrong.append(f"{doc}: `{command}`: {problem}")
    assert not wrong, wrong


# --- snippets and metrics, on the session's PostgreSQL ---------------------------------


@pytest.fixture
def mem(open_runtime: Callable[..., Memstrata]) -> Memstrata:
    return open_runtime()


def test_the_agent_tools_snippets_run(mem: Memstrata, settings: Settings) -> None:
    quick_start, pool = re.findall(
        r"```python\n(.*?)```", _text(ROOT / "docs" / "AGENT_TOOLS.md"), re.S
    )[:2]

    async def platform_write_file(path: str, content: str) -> str:
        return f"wrote {path}"

    names: dict[str, Any] = {
        "mem": mem,
        "settings": settings,
        "user_id": "alice",
        "sid": "conversation-1",
        "name": "record_memory",
        "arguments_json": json.dumps({"content": "Prefers short answers"}),
        "platform_write_file": platform_write_file,
    }
    exec("async def main():\n" + textwrap.indent(quick_start, "    ") + "    return result", names)
    result = asyncio.run(names["main"]())
    assert str(result) == "Recorded in MEMORY.md under ## Notes (version 2)."

    exec(pool, names)
    assert "alice" in mem.pool
    user = mem.store.get_memory_file("alice", "user")
    assert user is not None
    asyncio.run(mem.sync.frontend_edit("alice", "user", user.content + "\n- x", user.version))
    assert "alice" not in mem.pool  # a person's edit drops the cached agent


def _metric(name: str) -> str:
    return re.sub(r"_(total|count|sum|bucket|created)$", "", name)


def test_every_metric_is_documented_and_every_documented_one_exists(mem: Memstrata) -> None:
    with TestClient(create_app(memstrata=mem)) as client:
        exposed = {
            _metric(n) for n in re.findall(r"^# TYPE (\w+)", client.get("/metrics").text, re.M)
        }
    known = exposed | {_metric(n) for n in re.findall(r'"(memstrata_\w+)"', SRC)}
    documented = set()
    for path in DOCS:
        for base, suffix in _named(_text(path), "memstrata_"):
            if suffix is None:
                documented.add(_metric(base))
            else:
                documented.add(_expand(_metric(base), _metric(suffix), known) or base + suffix)
    documented.discard("memstrata_agent_pool")  # the NOTIFY channel, not a metric
    assert exposed <= documented, f"on /metrics but in no doc: {exposed - documented}"
    unknown = {n for n in documented if n not in exposed and n not in SRC}
    assert not unknown, f"documented but never registered: {unknown}"
