"""Request and response bodies: errors, the configuration routes' and the probes'; the
memory routes' (search, turns, batches) are :mod:`memstrata.api.memory_schemas`. Field
names are spec §3's, byte for byte."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from memstrata import package_version
from memstrata.db.integers import MAX_INT
from memstrata.db.migrate import schema_head


class ErrorBody(BaseModel):
    """Every error: ``code``, ``detail`` (the spec's words where it has them) and an
    English ``message``; 409 and 422 add the fields below."""

    code: str = Field(examples=["invalid_file_name"], description="Machine-readable.")
    detail: str = Field(examples=["无效的文件名"])
    message: str = Field(examples=["invalid file name: use one of user, soul, memory"])
    expected_version: int | None = Field(default=None, description="409 only.")
    current_version: int | None = Field(default=None, description="409 only.")
    same_content: bool | None = Field(
        default=None,
        description="409 only, and only when true: the current version holds the very text "
        "the refused write sent (a retry of a write that landed).",
    )
    errors: list[dict[str, object]] | None = Field(default=None, description="422 only.")


def error_responses(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The ``responses=`` of a route: ``statuses`` plus 401 (every ``/api`` route
    authenticates) and 503 (every one that reaches the database, the sandbox or the
    embedding API can meet it down), each with ``ErrorBody``."""
    return {code: {"model": ErrorBody} for code in sorted({401, 503, *statuses})}


# FastAPI's own 422 answer and the schemas it describes it with. memstrata answers every
# 422 with ``ErrorBody`` (the routes that can give one declare it); FastAPI adds this one
# to any route with a parameter, e.g. GET /agent-files/{name}, which never answers 422.
_FASTAPI_422 = "#/components/schemas/HTTPValidationError"
_FASTAPI_422_SCHEMAS = ("HTTPValidationError", "ValidationError")


def without_default_422(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (memstrata's OpenAPI document) without the 422 FastAPI adds by itself and
    the schemas that describe it. Idempotent; changes ``doc`` in place."""
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if _schema_ref(responses.get("422")) == _FASTAPI_422:
                del responses["422"]
    for name in _FASTAPI_422_SCHEMAS:
        doc.get("components", {}).get("schemas", {}).pop(name, None)
    return doc


# Any path answers 405 to a method none of its routes takes, with an ``Allow`` header of
# every method some route at that path takes (``memstrata.api.errors``). OpenAPI has no
# response shared by every operation: each refers to this one.
_METHOD_NOT_ALLOWED = "MethodNotAllowed"
_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def with_method_not_allowed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (memstrata's own app's OpenAPI document) with the 405 of every path on each
    of its operations. Idempotent; changes ``doc`` in place."""
    shared = doc.setdefault("components", {}).setdefault("responses", {})
    shared[_METHOD_NOT_ALLOWED] = {
        "description": "The path does not take this method (`Allow` lists those it does).",
        "headers": {
            "Allow": {
                "description": "Every method some route at this path takes, e.g. `GET, PUT`.",
                "schema": {"type": "string"},
            }
        },
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{ErrorBody.__name__}"}}
        },
    }
    for operations in doc.get("paths", {}).values():
        for method, operation in operations.items():
            if method in _OPERATIONS:
                responses = operation.setdefault("responses", {})
                responses["405"] = {"$ref": f"#/components/responses/{_METHOD_NOT_ALLOWED}"}
    return doc


def _schema_ref(response: Any) -> Any:
    if not isinstance(response, dict):
        return None
    return response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")


class AgentFile(BaseModel):
    name: str = Field(examples=["user"])
    file_type: str = Field(examples=["user_md"])
    content: str
    version: int = Field(examples=[3])


class AgentFileUpdate(BaseModel):
    # An unknown field is a 422, never ignored: a misspelt ``expected_versoin`` would
    # otherwise turn a guarded write into last-writer-wins over a newer version.
    model_config = ConfigDict(extra="forbid")

    content: StrictStr = Field(description="The file's complete new text (UTF-8).")
    expected_version: Annotated[StrictInt, Field(ge=0, le=MAX_INT)] | None = Field(
        default=None,
        description="Optimistic lock: write only if the stored version is this one "
        "(0: only if the file does not exist). Same as the If-Match header.",
    )
    # Not a field of the request (left out of the schema): the GET response's name for the
    # version, refused with a message that says where it goes. A client sending the GET
    # body back with new content would otherwise overwrite a newer version unchecked.
    version: SkipJsonSchema[object] = Field(default=None, exclude=True, repr=False)

    @field_validator("version", mode="before")
    @classmethod
    def _version_goes_in_expected_version(cls, value: object) -> object:
        raise PydanticCustomError(
            "extra_forbidden",
            "unknown field: send the version you edited as expected_version "
            '(or as the If-Match header, e.g. If-Match: "3")',
        )


class AgentFileUpdated(BaseModel):
    name: str = Field(examples=["user"])
    file_type: str = Field(examples=["user_md"])
    version: int = Field(examples=[4])
    message: Literal["ok"] = "ok"
    # Not in spec §3, and sent only when true, so that a write's body stays the spec's.
    unchanged: Literal[True] | None = Field(
        default=None,
        description="Present (true) when the file held this content already: nothing was "
        "written, `version` is the stored one (a retried PUT whose first try landed).",
    )


class SkillInfo(BaseModel):
    name: str = Field(examples=["web_search"])
    description: str = Field(examples=["搜索互联网"])
    description_en: str | None = Field(
        default=None,
        description="The description in English, for a page in English; null if the skill "
        "has none.",
        examples=["Search the internet"],
    )
    category: str = Field(examples=["builtin"])
    enabled: bool


class SkillList(BaseModel):
    skills: list[SkillInfo]


class SkillUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool


class SkillUpdated(BaseModel):
    skill_name: str = Field(examples=["web_search"])
    enabled: bool
    message: Literal["ok"] = "ok"


class Health(BaseModel):
    status: Literal["ok"] = "ok"


EmbeddingState = Literal["ok", "slow", "unreachable", "unproven", "misconfigured", "off", "unknown"]


class Readiness(BaseModel):
    status: str
    database: str = Field(
        description="ok; saturated: every connection slot of the server is taken, this "
        "process's pooled connections still answer, or every connection of this process's "
        "own pool is in use (ready; vectors unknown then); disk_full: the database refused "
        "a statement for a full disk within the last 30 s (ready: reads answer); "
        "not_accepting: the server takes no new connections but serves this process's "
        "open ones (its postmaster alone stopped; ready, nothing read); "
        "unreachable, starting, or pool_exhausted: this process's pool full and, since the "
        "last probe, its checkouts timed out with none served (503)."
    )
    pgvector: str | None = None
    vectors: Literal["ok", "degraded", "off", "unknown"] = Field(
        default="unknown",
        description="degraded: rows wait for a vector (or have a vector of a wrong length), "
        "the embedding circuit is open, or the embedding API has not answered once since "
        "the process started; search still answers (BM25 for those rows). off: no "
        "embedding API.",
    )
    pending: int | None = Field(default=None, description="Rows waiting for a vector.")
    embedding: EmbeddingState = Field(
        default="unknown",
        description="The embedding API as this process's circuit breakers see it (no "
        "request of its own): ok; slow: requests timed out (or answered late) within the "
        "last minute, or a circuit is open on a timeout, while the server answered a cheap "
        "request (GET …/models) after it: raise the timeout `embedding_check` names "
        "(`embedding_slow_s`: the longest measured); unreachable: a circuit is open (the "
        "documents' or the query server's) for another reason or on a server that does not "
        "answer at all, searches answer BM25-only until it closes, or, before any circuit "
        "opens, a request timed out or waits past its timeout and the cheap request went "
        "unanswered after it (a frozen server), until the server answers again; unproven: "
        "it has not answered once since the process started; misconfigured: it answered "
        "the start-up probe but refused the configuration (a wrong `dimensions`, a model "
        "name it does not serve; `embedding_check` says what to fix), so writes store texts "
        "without vectors and searches answer BM25-only until it is fixed and the process "
        "restarted; off: no embedding API; unknown: not ready (503). A backlog with the API "
        "ok is vectors degraded, embedding ok.",
    )
    embedding_check: str | None = Field(
        default=None,
        description="While embedding is misconfigured or slow: the setting to check (slow: "
        "the timeout to raise). Absent otherwise.",
    )
    embedding_slow_s: float | None = Field(
        default=None,
        description="While embedding is slow: the longest a recent request took (a late "
        "answer) or waited before it timed out, in seconds. Absent otherwise.",
    )
    release: str = Field(
        default_factory=package_version,
        description="This replica's memstrata release (as `memstrata --version`): during a "
        "rolling upgrade, which code answers.",
    )
    schema_head: str | None = Field(
        default_factory=schema_head,
        description="The schema revision this release brings the database to.",
    )
    # Only while a disk is full (``answer``), so a healthy answer is as it always was.
    disk: Literal["full"] | None = Field(
        default=None,
        description="full: a local directory memstrata writes (the data directory, the "
        "embedded PostgreSQL's files, the sandbox root) has less than 16 MiB or no inode "
        "free; writes may answer 503 until room is made. Still ready: reads answer. Absent "
        "when every disk has room.",
    )
    disk_path: str | None = Field(
        default=None, description="The directory whose file system is full (disk: full)."
    )
    background: Literal["restarted", "dead"] | None = Field(
        default=None,
        description="A background thread of this process died (an exception its loop did "
        "not catch): restarted: started again by this probe or within the last minute; "
        "dead: it died 4 times within 10 minutes and is left so, restart the process. "
        "Still ready: search answers. Absent while every one runs.",
    )
    background_threads: list[str] | None = Field(
        default=None,
        description="The threads `background` is about: database-monitor, embedding-healer.",
    )

    def answer(self) -> dict[str, Any]:
        """The body /readyz sends: ``disk`` and ``disk_path`` left out while there is room,
        ``embedding_check`` and ``embedding_slow_s`` while they have nothing to say."""
        left_out = set() if self.disk else {"disk", "disk_path"}
        if self.embedding_check is None:
            left_out.add("embedding_check")
        if self.embedding_slow_s is None:
            left_out.add("embedding_slow_s")
        if self.background is None:
            left_out |= {"background", "background_threads"}
        return self.model_dump(exclude=left_out)
