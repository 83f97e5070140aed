"""Open the configured database: the external URL, or the embedded server."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from memstrata.config import Settings
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.db.migrate import check_ready, ensure_ready


@dataclass
class Database:
    engine: Engine
    sessions: sessionmaker[Session]
    embedded: EmbeddedPostgres | None = field(default=None)

    @classmethod
    def open(cls, settings: Settings, *, migrate: bool = True) -> Database:
        """Connect (starting the embedded server if no URL is set) and check the schema.

        With ``migrate`` the schema is checked: brought to head when
        ``settings.migrate_on_start`` (the default), else required to be at head already
        (replicas; ``memstrata db upgrade`` migrates). A missing pgvector fails loudly.
        """
        embedded: EmbeddedPostgres | None = None
        url = settings.database_url
        if url is None:
            embedded = EmbeddedPostgres(settings.data_dir)
            url = embedded.start()
        engine = make_engine(url, pool_size=settings.db_pool_size)
        db = cls(engine, make_session_factory(engine), embedded)
        if migrate:
            try:
                (ensure_ready if settings.migrate_on_start else check_ready)(engine)
            except Exception:
                db.close()
                raise
        return db

    def close(self) -> None:
        self.engine.dispose()
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
