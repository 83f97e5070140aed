"""The logging a long-running memstrata service sets up from its settings: one stderr
handler in the configured format (``MEMSTRATA_LOG_LEVEL``, ``MEMSTRATA_LOG_JSON``), then a
``config.unknown_variable`` warning for each ``MEMSTRATA_*`` variable that names no
setting, in the environment or in the ``.env`` file of the working directory (pydantic
ignores it, so a misspelling would otherwise go unnoticed).

Audit events — the record of what was done on an operator's legal request (``user.erased``
of a GDPR erasure) — go to the ``memstrata.audit`` logger, which logs at INFO whatever the
level: the level tunes diagnostics, and ``memstrata user erase`` at a short command's
WARNING (or under ``MEMSTRATA_LOG_LEVEL=ERROR``) would otherwise leave no line of the
erasure.

Called by the CLI for every command and by ``create_app()`` when it builds its settings
from the environment (``uvicorn memstrata.api.app:create_app --factory``). A host app that
mounts memstrata keeps its own logging; the library never configures it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from memstrata.config import ENV_FILE, Settings, env_file_variables, unknown_variables
from memstrata.logs import AUDIT_LOGGER, configure_logging, log_event

logger = logging.getLogger(__name__)


def configure_service_logging(settings: Settings, level: str | None = None) -> None:
    """``level`` overrides the configured one (short CLI commands: WARNING, unless the
    operator set ``MEMSTRATA_LOG_LEVEL``)."""
    configure_logging(level or settings.log_level, settings.log_json)
    logging.getLogger(AUDIT_LOGGER).setLevel(logging.INFO)
    for name, closest in unknown_variables(os.environ):
        log_event(logger, "config.unknown_variable", logging.WARNING, name=name, closest=closest)
    # The .env file too: a misspelt line there went unnoticed (a name the environment also
    # sets was reported above).
    in_file = {k: v for k, v in env_file_variables().items() if k not in os.environ}
    for name, closest in unknown_variables(in_file):
        log_event(
            logger,
            "config.unknown_variable",
            logging.WARNING,
            name=name,
            closest=closest,
            file=str(Path(ENV_FILE).resolve()),
        )
