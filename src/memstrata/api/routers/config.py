"""Spec §3: the four configuration endpoints (memory files and skills)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Request, Response
from fastapi.routing import APIRoute

from memstrata.api.errors import ApiError
from memstrata.api.routing import (
    Context,
    CurrentUser,
    checked_before_body,
    larger_body,
    one_trailing_slash_dropped,
    register_anything_convertor,
)
from memstrata.api.schemas import (
    AgentFile,
    AgentFileUpdate,
    AgentFileUpdated,
    SkillInfo,
    SkillList,
    SkillUpdate,
    SkillUpdated,
    error_responses,
)
from memstrata.config import file_request_bytes
from memstrata.db.integers import MAX_INT
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind, api_kind

# One of our ETags: "3", weak W/"3", or bare 3; quotes balanced. Up to ten digits: a
# version may reach MAX_INT (``memstrata db restored`` lifts versions by a million a run).
_ETAG = re.compile(r'\A(?:(?:W/)?"([0-9]{1,10})"|([0-9]{1,10}))\Z')


def etag(version: int) -> str:
    return f'"{version}"'


@checked_before_body
async def path_kind(
    name: Annotated[
        str,
        # Documented as an enum, validated by api_kind: a bad name is spec §3's 400, not 422.
        Path(
            description="user, soul or memory",
            json_schema_extra={"enum": [k.api_name for k in USER_FILE_KINDS]},
        ),
    ],
) -> FileKind:
    # Checked before the body (``checked_before_body``), so that a bad name is a 400 even
    # when the body is also invalid (422) or not JSON at all; async, because FastAPI runs a
    # plain ``def`` dependency on a worker thread.
    return api_kind(one_trailing_slash_dropped(name))


def parse_if_match(values: list[str]) -> int | None:
    """The version in the ``If-Match`` header lines ``values`` (our ETags are
    ``"<version>"``); None for no header or ``*``. Several lines are one comma-separated
    list (RFC 9110), and it must hold exactly one ETag: a second one, on the same line or
    another, would otherwise be ignored and the write applied against it."""
    if not values:
        return None
    joined = ", ".join(values)
    items = [item.strip() for item in joined.split(",")]
    if items == ["*"]:
        return None
    match = _ETAG.match(items[0]) if len(items) == 1 else None
    if match is None or int(match.group(1) or match.group(2)) > MAX_INT:
        raise ApiError(
            400,
            f'If-Match must be one ETag as returned by GET, such as "3"; got {joined[:40]!r}',
        )
    return int(match.group(1) or match.group(2))


def expected_version(body_version: int | None, if_match: list[str]) -> int | None:
    header_version = parse_if_match(if_match)
    if body_version is not None and header_version is not None and body_version != header_version:
        raise ApiError(
            400,
            f"expected_version {body_version} and If-Match {', '.join(if_match)!r} disagree; "
            "send one",
        )
    return body_version if body_version is not None else header_version


def build_router(route_class: type[APIRoute]) -> APIRouter:
    register_anything_convertor()
    router = APIRouter(prefix="/api/config", tags=["config"], route_class=route_class)

    # ``name:anything``: a name with "/" or an empty one reaches the route, so it is 401
    # without a token and spec §3's 400 with one, never a 404 "Not Found".
    @router.get("/agent-files/{name:anything}", responses=error_responses(400))
    async def get_agent_file(
        user_id: CurrentUser,
        kind: Annotated[FileKind, Depends(path_kind)],
        response: Response,
        context: Context,
    ) -> AgentFile:
        """One memory file. A user with no files yet is provisioned from the templates."""
        file, provisioned = await context.mem.sync.read_file(user_id, kind)
        if provisioned:
            context.metrics.record_sync("provision", "ok")
        response.headers["ETag"] = etag(file.version)
        response.headers["Cache-Control"] = "private, no-cache"
        return AgentFile(
            name=kind.api_name,
            file_type=kind.file_type,
            content=file.content,
            version=file.version,
        )

    # Without it, Starlette would answer "/agent-files" with a redirect to "/agent-files/",
    # before authentication; it is the same missing name: 401, then spec §3's 400.
    @router.api_route("/agent-files", methods=["GET", "PUT"], include_in_schema=False)
    async def no_agent_file_name(user_id: CurrentUser) -> None:
        api_kind("")

    @router.put(
        "/agent-files/{name:anything}",
        responses=error_responses(400, 409, 413, 422),
        response_model_exclude_none=True,  # ``unchanged`` only when true
    )
    # The file limit is measured on the decoded content (413 over it); the body may be as
    # large as the JSON of a file at that limit, however escaped.
    @larger_body(file_request_bytes)
    async def put_agent_file(
        user_id: CurrentUser,
        kind: Annotated[FileKind, Depends(path_kind)],
        body: AgentFileUpdate,
        request: Request,
        response: Response,
        context: Context,
        # Declared for the OpenAPI document; FastAPI gives only its first line, so it is
        # read below from the request, every line of it.
        if_match: Annotated[str | None, Header(description='ETag from GET, e.g. "3"')] = None,
    ) -> AgentFileUpdated:
        """Replace a memory file: DB → embeddings → sandbox (forced) → AgentPool eviction.
        Content the file holds already, on the current version (or none), is no new
        version: 200 with the stored version and `unchanged: true`. On an older version
        it is the 409 with `same_content: true` (MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged:
        the 200 as on the current version). The body may be up to
        6 × MEMSTRATA_MAX_CONTENT_BYTES + 4096 bytes (MEMSTRATA_MAX_REQUEST_BYTES if larger)."""
        version = expected_version(body.expected_version, request.headers.getlist("if-match"))
        try:
            file = await context.mem.sync.frontend_edit(
                user_id, kind, body.content, expected_version=version
            )
        except Exception as exc:
            context.metrics.record_sync("frontend_edit", type(exc).__name__)
            raise
        context.metrics.record_sync("frontend_edit", "ok")
        response.headers["ETag"] = etag(file.version)
        return AgentFileUpdated(
            name=kind.api_name,
            file_type=kind.file_type,
            version=file.version,
            unchanged=None if file.changed else True,
        )

    # "/skills/" too: the PUT route's {skill_name:anything} matches an empty name, which
    # would turn the trailing-slash redirect into a 405.
    @router.get("/skills", responses=error_responses())
    @router.get("/skills/", include_in_schema=False)
    def list_skills(user_id: CurrentUser, context: Context) -> SkillList:
        """The discovered skills with this user's switches (enabled unless turned off)."""
        skills = context.mem.skills.list_for_user(user_id)
        return SkillList(
            skills=[
                SkillInfo(
                    name=s.name,
                    description=s.description,
                    description_en=s.description_en,
                    category=s.category,
                    enabled=s.enabled,
                )
                for s in skills
            ]
        )

    @router.put("/skills/{skill_name:anything}", responses=error_responses(400, 404, 413, 422))
    def put_skill(
        skill_name: str, body: SkillUpdate, user_id: CurrentUser, context: Context
    ) -> SkillUpdated:
        """Turn one skill on or off for this user; 404 for a skill that is not installed."""
        name = one_trailing_slash_dropped(skill_name)
        skill = context.mem.skills.set_enabled(user_id, name, body.enabled)
        return SkillUpdated(skill_name=skill.name, enabled=skill.enabled)

    return router
