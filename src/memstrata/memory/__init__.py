"""Memory files: kinds, templates, and the DB-backed store (the source of truth)."""
