"""Spec §3, byte for byte: every endpoint's status and body, through HTTP, against the real
database and a real directory sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from memstrata.config import Settings
from memstrata.db.models import MemoryEmbedding, UserMemory
from memstrata.memory.kinds import FileKind
from memstrata.memory.templates import TemplateSet
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name
from tests.api.auth import AuthHeader
from tests.api.conftest import plain

FILES = "/api/config/agent-files/{}"
INVALID_BODY = {
    "code": "invalid_file_name",
    "detail": "无效的文件名",
    "message": "invalid file name: use one of user, soul, memory",
}
BUILTIN_SKILLS = [
    {
        "name": "code_interpreter",
        "description": "在沙箱中运行 Python 代码，用于计算、数据分析和绘图",
        "description_en": (
            "Run Python code in the sandbox for calculations, data analysis and plots"
        ),
        "category": "builtin",
        "enabled": True,
    },
    {
        "name": "file_manager",
        "description": "读取、创建、编辑和整理沙箱中的文件",
        "description_en": "Read, create, edit and organise the files in the sandbox",
        "category": "builtin",
        "enabled": True,
    },
    {
        "name": "memory_search",
        "description": "检索用户的长期记忆和历史对话",
        "description_en": "Search the user's long-term memory and past conversations",
        "category": "builtin",
        "enabled": True,
    },
    {
        "name": "web_search",
        "description": "搜索互联网",
        "description_en": "Search the internet",
        "category": "builtin",
        "enabled": True,
    },
]


def _sandbox_file(settings: Settings, user: str, name: str) -> Path:
    return settings.resolved_sandbox_root / safe_dir_name(user) / name


def _rows(mem: Memstrata, user: str) -> list[tuple[str, int]]:
    with mem.db.sessions() as session:
        rows = session.execute(
            select(UserMemory.file_type, UserMemory.version)
            .where(UserMemory.user_id == user)
            .order_by(UserMemory.file_type)
        )
        return [(t, v) for t, v in rows]


# -- GET /api/config/agent-files/{name} -----------------------------------------------------


@pytest.mark.parametrize("kind", [FileKind.USER, FileKind.SOUL, FileKind.MEMORY])
def test_get_provisions_a_new_user_from_the_templates(
    client: TestClient,
    auth: AuthHeader,
    templates: TemplateSet,
    settings: Settings,
    mem: Memstrata,
    kind: FileKind,
) -> None:
    response = client.get(FILES.format(kind.api_name), headers=auth("alice"))
    assert response.status_code == 200
    assert response.json() == {
        "name": kind.api_name,
        "file_type": kind.file_type,
        "content": templates.load(kind),
        "version": 1,
    }
    assert list(response.json()) == ["name", "file_type", "content", "version"]
    assert response.headers["etag"] == '"1"'
    # template → DB → sandbox, for all three files and AGENTS.md
    assert _rows(mem, "alice") == [("memory_md", 1), ("soul_md", 1), ("user_md", 1)]
    for k in (FileKind.USER, FileKind.SOUL, FileKind.MEMORY, FileKind.AGENTS):
        assert _sandbox_file(settings, "alice", k.filename).read_text() == templates.load(k)


def test_get_is_idempotent(client: TestClient, auth: AuthHeader, mem: Memstrata) -> None:
    first = client.get(FILES.format("user"), headers=auth())
    second = client.get(FILES.format("user"), headers=auth())
    assert first.json() == second.json()
    assert _rows(mem, "alice") == [("memory_md", 1), ("soul_md", 1), ("user_md", 1)]


@pytest.mark.parametrize(
    "name", ["agents", "AGENTS.md", "user_md", "USER.md", "User", "user ", "notes", "x" * 300]
)
def test_invalid_names_are_400(client: TestClient, auth: AuthHeader, name: str) -> None:
    for method in ("GET", "PUT"):
        response = client.request(method, FILES.format(name), headers=auth(), json={"content": "x"})
        assert (response.status_code, response.json()) == (400, INVALID_BODY), method


def test_invalid_name_wins_over_an_invalid_body(client: TestClient, auth: AuthHeader) -> None:
    response = client.put(FILES.format("agents"), headers=auth(), json={"wrong": 1})
    assert (response.status_code, response.json()) == (400, INVALID_BODY)


# -- PUT /api/config/agent-files/{name} -----------------------------------------------------


def test_put_contract_and_side_effects(
    client: TestClient, auth: AuthHeader, settings: Settings, mem: Memstrata
) -> None:
    client.get(FILES.format("user"), headers=auth())
    mem.pool.get("alice", object)  # cached agents of alice and bob
    mem.pool.get("bob", object)
    response = client.put(FILES.format("user"), headers=auth(), json={"content": "新的记忆内容"})
    assert response.status_code == 200
    assert response.json() == {
        "name": "user",
        "file_type": "user_md",
        "version": 2,
        "message": "ok",
    }
    assert list(response.json()) == ["name", "file_type", "version", "message"]
    assert response.headers["etag"] == '"2"'
    # DB, then the forced push to the sandbox, then embeddings for USER.md
    got = client.get(FILES.format("user"), headers=auth()).json()
    assert (got["content"], got["version"]) == ("新的记忆内容", 2)
    assert _sandbox_file(settings, "alice", "USER.md").read_text() == "新的记忆内容"
    with mem.db.sessions() as session:
        chunks = session.scalars(
            select(MemoryEmbedding.chunk_text).where(
                MemoryEmbedding.user_id == "alice", MemoryEmbedding.file_path == "USER.md"
            )
        ).all()
    assert chunks == ["新的记忆内容"]
    assert "alice" not in mem.pool  # AgentPool invalidated for alice only
    assert "bob" in mem.pool


def test_put_before_any_get_creates_version_1(client: TestClient, auth: AuthHeader) -> None:
    response = client.put(FILES.format("soul"), headers=auth(), json={"content": "calm"})
    assert response.json() == {
        "name": "soul",
        "file_type": "soul_md",
        "version": 1,
        "message": "ok",
    }


def test_stale_expected_version_is_409(client: TestClient, auth: AuthHeader) -> None:
    client.get(FILES.format("memory"), headers=auth())
    first = client.put(
        FILES.format("memory"), headers=auth(), json={"content": "a", "expected_version": 1}
    )
    assert first.json()["version"] == 2
    stale = client.put(
        FILES.format("memory"), headers=auth(), json={"content": "b", "expected_version": 1}
    )
    assert stale.status_code == 409
    assert plain(stale.json()) == {
        "detail": "version conflict on MEMORY.md: expected version 1, found version 2; "
        "read it again and apply your change to version 2",
        "expected_version": 1,
        "current_version": 2,
    }
    assert client.get(FILES.format("memory"), headers=auth()).json()["content"] == "a"


def test_expected_version_0_means_must_not_exist(client: TestClient, auth: AuthHeader) -> None:
    body = {"content": "x", "expected_version": 0}
    assert client.put(FILES.format("user"), headers=auth(), json=body).json()["version"] == 1
    # Other text: the same one is stored already, which is no conflict (test_idempotent_put).
    again = client.put(FILES.format("user"), headers=auth(), json={**body, "content": "y"})
    assert again.status_code == 409
    assert (again.json()["expected_version"], again.json()["current_version"]) == (0, 1)


def test_etag_and_if_match(client: TestClient, auth: AuthHeader) -> None:
    etag = client.get(FILES.format("user"), headers=auth()).headers["etag"]
    ok = client.put(
        FILES.format("user"), headers={**auth(), "If-Match": etag}, json={"content": "one"}
    )
    assert (ok.status_code, ok.headers["etag"]) == (200, '"2"')
    stale = client.put(
        FILES.format("user"), headers={**auth(), "If-Match": etag}, json={"content": "two"}
    )
    assert stale.status_code == 409
    assert (stale.json()["expected_version"], stale.json()["current_version"]) == (1, 2)
    for header in ('W/"2"', "3", "*"):  # weak and bare forms of the current version; any
        response = client.put(
            FILES.format("user"), headers={**auth(), "If-Match": header}, json={"content": header}
        )
        assert response.status_code == 200, header
    assert client.get(FILES.format("user"), headers=auth()).headers["etag"] == '"5"'


@pytest.mark.parametrize(
    ("if_match", "body_version", "detail"),
    [
        ('"abc"', None, 'If-Match must be one ETag as returned by GET, such as "3"; got \'"abc"\''),
        (
            '"1", "2"',
            None,
            'If-Match must be one ETag as returned by GET, such as "3"; got \'"1", "2"\'',
        ),
        ('"1"', 2, "expected_version 2 and If-Match '\"1\"' disagree; send one"),
        (
            '"2147483648"',
            None,
            'If-Match must be one ETag as returned by GET, such as "3"; got \'"2147483648"\'',
        ),
    ],
)
def test_bad_if_match_is_400(
    client: TestClient, auth: AuthHeader, if_match: str, body_version: int | None, detail: str
) -> None:
    body: dict[str, object] = {"content": "x"}
    if body_version is not None:
        body["expected_version"] = body_version
    response = client.put(FILES.format("user"), headers={**auth(), "If-Match": if_match}, json=body)
    assert (response.status_code, plain(response.json())) == (400, {"detail": detail})


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({}, "invalid request: missing required field: content"),
        ({"content": 5}, "invalid request: content must be a JSON string; got 5"),
        (
            {"content": "x", "expected_version": -1},
            "invalid request: expected_version must be a JSON integer from 0 to 2147483647; got -1",
        ),
        (
            {"content": "x", "expected_version": "1"},
            "invalid request: expected_version must be a JSON integer from 0 to 2147483647: "
            'send 1, not "1"',
        ),
        ({"content": "a\x00b"}, "content must not contain NUL characters ('\\x00' at character 2)"),
    ],
)
def test_put_invalid_bodies_are_422(
    client: TestClient, auth: AuthHeader, body: dict[str, object], detail: str
) -> None:
    response = client.put(FILES.format("user"), headers=auth(), json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == detail


def test_content_over_the_file_limit_is_413(client: TestClient, auth: AuthHeader) -> None:
    content = "x" * (256 * 1024 + 1)
    response = client.put(FILES.format("user"), headers=auth(), json={"content": content})
    assert (response.status_code, plain(response.json())) == (
        413,
        {
            "detail": f"content is {len(content)} bytes, over the limit of {256 * 1024} bytes "
            "(shorten the file; an operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
        },
    )


# -- skills --------------------------------------------------------------------------------


def test_list_skills(client: TestClient, auth: AuthHeader) -> None:
    response = client.get("/api/config/skills", headers=auth())
    assert (response.status_code, response.json()) == (200, {"skills": BUILTIN_SKILLS})


def test_toggle_a_skill(client: TestClient, auth: AuthHeader) -> None:
    response = client.put("/api/config/skills/web_search", headers=auth(), json={"enabled": False})
    assert (response.status_code, response.json()) == (
        200,
        {"skill_name": "web_search", "enabled": False, "message": "ok"},
    )
    assert list(response.json()) == ["skill_name", "enabled", "message"]
    listed = client.get("/api/config/skills", headers=auth()).json()["skills"]
    assert [s["enabled"] for s in listed] == [True, True, True, False]
    back = client.put("/api/config/skills/web_search", headers=auth(), json={"enabled": True})
    assert back.json() == {"skill_name": "web_search", "enabled": True, "message": "ok"}
    assert client.get("/api/config/skills", headers=auth()).json() == {"skills": BUILTIN_SKILLS}


def test_unknown_skill_is_404(client: TestClient, auth: AuthHeader) -> None:
    response = client.put("/api/config/skills/teleport", headers=auth(), json={"enabled": True})
    assert (response.status_code, plain(response.json())) == (
        404,
        {
            "detail": "no skill named 'teleport'; installed skills: code_interpreter, "
            "file_manager, memory_search, web_search"
        },
    )


# -- one user's token never reaches another user's data ------------------------------------


def test_users_are_isolated(
    client: TestClient, auth: AuthHeader, templates: TemplateSet, settings: Settings
) -> None:
    client.put(FILES.format("user"), headers=auth("alice"), json={"content": "alice's secret"})
    client.put("/api/config/skills/web_search", headers=auth("alice"), json={"enabled": False})

    bob_file = client.get(FILES.format("user"), headers=auth("bob")).json()
    assert bob_file == {
        "name": "user",
        "file_type": "user_md",
        "content": templates.load(FileKind.USER),
        "version": 1,
    }
    assert client.get("/api/config/skills", headers=auth("bob")).json() == {
        "skills": BUILTIN_SKILLS
    }
    # bob's writes land in bob's row and bob's sandbox only
    client.put(FILES.format("user"), headers=auth("bob"), json={"content": "bob's"})
    alice_file = client.get(FILES.format("user"), headers=auth("alice")).json()
    assert (alice_file["content"], alice_file["version"]) == ("alice's secret", 1)
    assert _sandbox_file(settings, "alice", "USER.md").read_text() == "alice's secret"
    assert _sandbox_file(settings, "bob", "USER.md").read_text() == "bob's"
