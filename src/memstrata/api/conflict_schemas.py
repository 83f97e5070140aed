"""Response bodies of ``/api/memory/conflicts`` (the agents' kept-aside copies), built from
the service's values (:mod:`memstrata.memory.conflicts`) so /openapi.json describes them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from memstrata.memory.conflicts import (
    DEFAULT_PAGE,
    MAX_PAGE,
    CopyName,
    CopyPage,
    CopySummary,
    CopyText,
)

_NAME = "MEMORY.md.20260301T120000.123456Z.md"


class ConflictCopyFields(BaseModel):
    """What a copy's name says, in every answer about one."""

    name: str = Field(
        examples=[_NAME],
        description="The copy's name, as the other two routes take it (percent-encoded in "
        "the URL). `sessions/<dir>/…` for a copy kept in a session's sandbox.",
    )
    file: str = Field(examples=["memory"], description="user, soul or memory.")
    filename: str = Field(examples=["MEMORY.md"])
    reason: Literal["conflict", "rejected"] = Field(
        description="conflict: the agent's edit conflicted with a human's and the stored "
        "version won. rejected: the database refused the agent's text (over the size limit, "
        "NUL characters, not UTF-8 text)."
    )
    saved_at: datetime = Field(
        examples=["2026-03-01T12:00:00.123456Z"], description="When it was kept aside (UTC)."
    )
    session_dir: str | None = Field(
        examples=[None],
        description="The session sandbox's directory under `sessions/` when the copy was "
        "kept there; null for the user's own sandbox.",
    )
    path: str = Field(
        examples=[f".memstrata/conflicts/{_NAME}"],
        description="Where the copy is, relative to the user's sandbox (the path the agent's "
        "tools were told).",
    )

    @classmethod
    def fields_of(cls, copy: CopyName) -> dict[str, object]:
        return {
            "name": copy.name,
            "file": copy.kind.api_name,
            "filename": copy.kind.filename,
            "reason": copy.reason,
            "saved_at": copy.saved_at,
            "session_dir": copy.session_dir,
            "path": copy.path,
        }


class ConflictCopy(ConflictCopyFields):
    size_bytes: int | None = Field(
        examples=[1834], description="Null when it could not be read (see `warnings`)."
    )
    preview: str | None = Field(
        examples=["- 2026-03-01: prefers oolong tea"],
        description="What it changed: its first 3 lines the stored file does not have (its "
        "first 3 lines when there are none), at most 240 characters; null when it could not "
        "be read.",
    )

    @classmethod
    def of(cls, summary: CopySummary) -> ConflictCopy:
        return cls.model_validate(
            {
                **cls.fields_of(summary.copy),
                "size_bytes": summary.size_bytes,
                "preview": summary.preview,
            }
        )


class ConflictList(BaseModel):
    conflicts: list[ConflictCopy] = Field(description="Newest first.")
    total: int | None = Field(
        examples=[1],
        description="How many copies there are (of `file`, when given); null when the "
        "sandbox could not be listed.",
    )
    offset: int = Field(examples=[0])
    limit: int = Field(examples=[DEFAULT_PAGE], description=f"1 to {MAX_PAGE}.")
    next_offset: int | None = Field(
        examples=[None], description="The `offset` of the next page; null on the last one."
    )
    sandbox: Literal["ok", "sandbox_failed"] = Field(
        description="sandbox_failed: the sandbox failed or did not answer in time; the list "
        "holds what could be read, and `warnings` says what could not."
    )
    warnings: list[str] = Field(examples=[[]])

    @classmethod
    def of(cls, page: CopyPage) -> ConflictList:
        return cls(
            conflicts=[ConflictCopy.of(s) for s in page.copies],
            total=page.total,
            offset=page.offset,
            limit=page.limit,
            next_offset=page.next_offset,
            sandbox=page.sandbox,
            warnings=page.warnings,
        )


class ConflictContent(ConflictCopyFields):
    content: str = Field(examples=["# MEMORY\n\n- 2026-03-01: prefers oolong tea\n"])
    size_bytes: int = Field(examples=[1834])
    undecodable: bool = Field(
        description="The file is not UTF-8 text: `content` shows each byte that does not "
        "decode as U+FFFD (the sandbox keeps the exact bytes)."
    )

    @classmethod
    def of(cls, text: CopyText) -> ConflictContent:
        return cls.model_validate(
            {
                **cls.fields_of(text.copy),
                "content": text.content,
                "size_bytes": text.size_bytes,
                "undecodable": text.undecodable,
            }
        )


class ConflictDismissed(BaseModel):
    name: str = Field(examples=[_NAME])
    message: Literal["ok"] = "ok"
