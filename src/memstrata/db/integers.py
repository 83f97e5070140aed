"""The bound of the spec's ``integer`` columns, apart from the table definitions (which
need SQLAlchemy): the services and the light CLI commands check numbers against it."""

# PostgreSQL ``integer`` columns (a file's version, a turn index) hold at most this.
MAX_INT = 2**31 - 1
