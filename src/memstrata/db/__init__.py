"""Database layer: the spec's tables, engine helpers, the embedded server, migrations."""
