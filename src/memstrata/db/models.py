"""The spec's tables (section 2), plus the few columns later features need.

Additions beyond the spec, and why:
- unique ``(user_id, file_type)`` / ``(user_id, skill_name)``: one row per file / skill.
- ``memory_embeddings.content_hash``: unchanged text is never re-embedded.
- ``memory_embeddings.embedding_model`` / ``embedding_dim``: which model produced a vector
  and its native length before padding, so a model change is detectable.
- ``memory_embeddings.source_ids``: the conversation turns a row came from.
- ``memory_embeddings.context``: for a conversation row that starts with the tail of the
  previous round (``{"chars": n, "source_ids": [...]}``), how much of ``chunk_text`` is that
  context and which turns it came from (see retrieval.rounds).
- unique ``(user_id, file_path, chunk_index)``: re-indexing the same turn is idempotent.
- index ``(user_id, id)``: the search cache asks "rows added since id X" and counts rows.
- ``memory_embeddings.inserted_at`` / ``embedding_error`` / ``embedding_attempts`` /
  ``embedding_claimed_until``: the background re-embedding queue (migration 0002,
  retrieval.healing).
- ``memory_embeddings.embedding_claimed_by`` and its partial index: the token of the worker
  holding a claim, whose advisory lock tells whether it still lives, so a dead worker's
  claims are taken back at once rather than after their lease (migration 0010,
  retrieval.claimer).
- table ``memory_index_state``: a per-user generation counter bumped with every change
  to a user's rows, so in-memory search indexes in any process can tell they are stale,
  and the counts of deleted rows and of the writes that counted them, so they can tell an
  append (read the new rows) from a deletion (compare ids) (migration 0005).
- table ``memory_index_snapshots``: a large user's conversation rows as one binary search
  index (retrieval.snapshot), derived data a cold load reads instead of every row
  (migration 0004).
- partial indexes on ``embedding_model`` and on failed rows: the healing backlog is
  counted from indexes, not by reading the table (migration 0006).
- table ``embedding_models``: the models the running re-embedding workers use and when
  each first appeared, so replicas of two models during a rolling model change do not
  re-embed each other's rows back and forth (migration 0007, retrieval.queue).
- ``NOT NULL`` on ``user_memory.updated_at``, ``memory_embeddings.created_at`` and
  ``user_skill_configs.enabled`` / ``updated_at``, which the spec gives only defaults: a
  row without its time (decay, the web page's "saved at") or its switch means nothing here.
- table ``memory_template_paragraphs``: every template paragraph a deployment has
  provisioned, so a template edited later still counts as scaffolding in older users'
  files (migration 0008, retrieval.scaffold).
- table ``sandbox_synced``: the DB version memstrata last left each sandbox file at, per
  user, sandbox provider identity, sandbox and file, so a read-back in any process naming
  the same sandboxes (or after a restart) without a trustworthy base record never writes
  an agent's copy over a newer version (migration 0011, sandbox.synced).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from memstrata.config import STORED_VECTOR_DIM


class Base(DeclarativeBase):
    pass


class UserMemory(Base):
    __tablename__ = "user_memory"
    __table_args__ = (UniqueConstraint("user_id", "file_type", name="uq_user_memory_user_file"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    file_type: Mapped[str] = mapped_column(String(20), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=1, server_default="1")
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True),
        nullable=False,
        default=func.now(),
        server_default=func.now(),
        onupdate=func.now(),
    )


class MemoryEmbedding(Base):
    __tablename__ = "memory_embeddings"
    __table_args__ = (
        Index(
            "uq_memory_embeddings_user_path_chunk",
            "user_id",
            "file_path",
            "chunk_index",
            unique=True,
        ),
        Index("ix_memory_embeddings_user_id_id", "user_id", "id"),
        Index(
            "ix_memory_embeddings_pending",
            "id",
            postgresql_where=text("embedding IS NULL AND embedding_error IS NULL"),
        ),
        Index(
            "ix_memory_embeddings_model",
            "embedding_model",
            postgresql_where=text("embedding_error IS NULL"),
        ),
        Index(
            "ix_memory_embeddings_failed",
            "id",
            postgresql_where=text("embedding_error IS NOT NULL"),
        ),
        Index(
            "ix_memory_embeddings_claimed",
            "embedding_claimed_by",
            postgresql_where=text("embedding_claimed_by IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    file_path: Mapped[str | None] = mapped_column(String(255), nullable=True)
    chunk_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    chunk_text: Mapped[str] = mapped_column(Text, nullable=False)
    embedding: Mapped[Any] = mapped_column(Vector(STORED_VECTOR_DIM), nullable=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=func.now(), server_default=func.now()
    )
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False, server_default="")
    embedding_model: Mapped[str | None] = mapped_column(String(200), nullable=True)
    embedding_dim: Mapped[int | None] = mapped_column(Integer, nullable=True)
    source_ids: Mapped[list[str] | None] = mapped_column(JSONB, nullable=True)
    context: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    inserted_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    embedding_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    embedding_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    embedding_claimed_until: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    embedding_claimed_by: Mapped[int | None] = mapped_column(Integer, nullable=True)
    bm25_terms: Mapped[str | None] = mapped_column(Text, nullable=True)  # retrieval/terms.py


class UserSkillConfig(Base):
    __tablename__ = "user_skill_configs"
    __table_args__ = (
        UniqueConstraint("user_id", "skill_name", name="uq_user_skill_configs_user_skill"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    skill_name: Mapped[str] = mapped_column(String(100), nullable=False)
    enabled: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=True, server_default="true"
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True),
        nullable=False,
        default=func.now(),
        server_default=func.now(),
        onupdate=func.now(),
    )


class MemoryIndexState(Base):
    __tablename__ = "memory_index_state"

    user_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    # Rows deleted by writers that count them, and generation bumps by such writers
    # (migration 0005): while the two counts of bumps agree, an unchanged ``removals``
    # means the rows since were only added.
    removals: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    counted_writes: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")


class MemoryIndexSnapshot(Base):
    __tablename__ = "memory_index_snapshots"
    __table_args__ = ({"prefixes": ["UNLOGGED"]},)  # derived data, see migration 0004

    user_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    model: Mapped[str] = mapped_column(Text, primary_key=True)  # "" when BM25-only
    format: Mapped[str] = mapped_column(Text, nullable=False)
    max_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    row_count: Mapped[int] = mapped_column(Integer, nullable=False)
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


class EmbeddingModelSeen(Base):
    __tablename__ = "embedding_models"

    model: Mapped[str] = mapped_column(Text, primary_key=True)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class MemoryTemplateParagraph(Base):
    __tablename__ = "memory_template_paragraphs"

    file_type: Mapped[str] = mapped_column(String(20), primary_key=True)
    paragraph_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    paragraph: Mapped[str] = mapped_column(Text, nullable=False)
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


class SandboxSynced(Base):
    __tablename__ = "sandbox_synced"

    user_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    # ``sandbox.synced.root_key``: the SHA-256 (hex) of the provider's identity.
    root: Mapped[str] = mapped_column(String(64), primary_key=True)
    # ``sandbox.synced.sandbox_key``: "" for the user's own sandbox, else the session
    # sandbox's directory name (bounded, injective).
    sandbox: Mapped[str] = mapped_column(String(200), primary_key=True)
    file_type: Mapped[str] = mapped_column(String(20), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
