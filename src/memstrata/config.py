"""Settings: every knob, read from ``MEMSTRATA_*`` environment variables (or a ``.env`` file).

Nothing here is instantiated at import time; each entry point (CLI, app factory, tests)
builds one ``Settings`` and passes it down.

``Settings`` is composed of four parts, each in a module of its own so that each reads in
one sitting: storage (``config_storage``), embeddings (``config_embedding``), search
(``config_search``) and serving (``config_serving``). Their public names are imported from
here, as they always were.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from memstrata.config_embedding import STORED_VECTOR_DIM as STORED_VECTOR_DIM
from memstrata.config_embedding import EmbeddingModelSpec as EmbeddingModelSpec
from memstrata.config_embedding import EmbeddingSettings
from memstrata.config_lists import LIST_EXAMPLES, list_example, must_be_list
from memstrata.config_search import CANDIDATE_MULTIPLIER as CANDIDATE_MULTIPLIER
from memstrata.config_search import INDEX_SNAPSHOT_MIN_ROWS as INDEX_SNAPSHOT_MIN_ROWS
from memstrata.config_search import MIN_CANDIDATES as MIN_CANDIDATES
from memstrata.config_search import MIN_CANDIDATES_DECAY as MIN_CANDIDATES_DECAY
from memstrata.config_search import PROMPT_BUDGET_RATIO as PROMPT_BUDGET_RATIO
from memstrata.config_search import QUERY_CACHE_ENTRIES as QUERY_CACHE_ENTRIES
from memstrata.config_search import SEARCH_CACHE_USERS as SEARCH_CACHE_USERS
from memstrata.config_search import SearchSettings
from memstrata.config_serving import LOG_LEVELS as LOG_LEVELS
from memstrata.config_serving import ServingSettings
from memstrata.config_storage import DB_CHECK_INTERVAL_S as DB_CHECK_INTERVAL_S
from memstrata.config_storage import EMBEDDED_DATABASE as EMBEDDED_DATABASE
from memstrata.config_storage import StorageSettings
from memstrata.config_storage import is_blank as is_blank
from memstrata.config_storage import unset_database_problem as unset_database_problem
from memstrata.errors import InvalidSettingError, SettingNotJSONError, UnknownSettingError
from memstrata.retrieval.chunk import CHUNK_TOKENS as CHUNK_TOKENS
from memstrata.retrieval.chunk import CONTEXT_TOKENS as CONTEXT_TOKENS

# MEMSTRATA_* variables that are no setting but are read on purpose (``make bench``).
TOOLING_VARIABLES = frozenset({"MEMSTRATA_LOCOMO"})
# The file Settings() reads beside the environment: relative, so the one in the working
# directory of the process (the environment wins over it).
ENV_FILE = ".env"


class Settings(ServingSettings, SearchSettings, EmbeddingSettings, StorageSettings, BaseSettings):
    """memstrata configuration. Environment variables are ``MEMSTRATA_<FIELD>``.

    The fields come in four parts: ``StorageSettings``'s, ``EmbeddingSettings``'s,
    ``SearchSettings``'s, then ``ServingSettings``'s. Pydantic puts the last-listed base's
    fields first, so the bases are listed in reverse to keep that order, which
    docs/CONFIGURATION.md follows.
    """

    # extra="ignore" is for the environment and the .env file, which may hold other
    # programs' variables (unknown MEMSTRATA_* ones are a warning: unknown_variables);
    # keyword arguments that name no setting are refused (settings_customise_sources).
    model_config = SettingsConfigDict(
        env_prefix="MEMSTRATA_", env_file=ENV_FILE, env_file_encoding="utf-8", extra="ignore"
    )

    if not TYPE_CHECKING:  # type checkers keep the signature pydantic's plugin gives

        def __init__(self, **values: Any) -> None:
            """Bad values are an ``InvalidSettingError``: pydantic's ValidationError (its
            callers go on catching it), also a MemstrataError, naming each variable; a
            value that is not JSON too (``SettingNotJSONError``)."""
            not_json: SettingNotJSONError | None = None
            try:
                super().__init__(**values)
            except InvalidSettingError:
                raise
            except ValidationError as exc:
                raise InvalidSettingError.of(exc) from None
            except SettingsError as exc:
                not_json = not_json_error(exc)
            if not_json is not None:
                # Raised here, not in the except block: it is not chained to pydantic-
                # settings' error, whose JSON error holds the value (a secret, maybe).
                raise not_json

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' own sources in its own order, once the keyword arguments are
        known to name settings (``UnknownSettingError`` naming the closest one): a
        misspelt ``Settings(prompt_budget_raito=0.2)`` was silently dropped. Checked here,
        not in a validator: a validator gets them merged with the .env file's extras."""
        if isinstance(init_settings, InitSettingsSource):
            check_setting_names(init_settings.init_kwargs, settings_cls.model_fields)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    # Before pydantic's own check, whose "Input should be a valid list" showed no example.
    # Here, not in a part: it spans the embedding and serving parts' list settings.
    _lists = field_validator(*LIST_EXAMPLES, mode="before")(must_be_list)


def not_json_error(exc: SettingsError) -> SettingNotJSONError:
    """pydantic-settings' refusal of a value that is not JSON, as the error naming its
    variable and how to write it: ``not valid JSON (<where>); list and object settings take
    JSON, e.g. '<the setting's example>'``. The message rule of the library and the CLI.
    Only a JSON decoder's error is quoted: it says where, never what was given."""
    field = re.search(r'field "(\w+)"', str(exc))
    name = field.group(1) if field else None
    where = f" ({exc.__cause__})" if isinstance(exc.__cause__, json.JSONDecodeError) else ""
    return SettingNotJSONError.naming(
        name,
        f"not valid JSON{where}; list and object settings take JSON, "
        f"e.g. '{list_example(name or '')}'",
    )


def check_setting_names(given: Iterable[str], known: Iterable[str]) -> None:
    """``UnknownSettingError`` for the names in ``given`` (keyword arguments, after
    pydantic-settings matched them to fields regardless of case) that are no setting."""
    fields = list(known)
    unknown = [name for name in given if name not in fields]
    if not unknown:
        return
    problems = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), fields, n=1, cutoff=0.6)
        problems.append(f"{name!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    one = len(unknown) == 1
    raise UnknownSettingError(
        f"Settings() got {'an unknown keyword argument' if one else 'unknown keyword arguments'} "
        f"{', '.join(problems)}: no setting has {'that name' if one else 'these names'} "
        "(every setting is listed in docs/CONFIGURATION.md and Settings.model_fields)"
    )


def env_file_variables(path: Path = Path(ENV_FILE)) -> dict[str, str]:
    """The variables of the ``.env`` file ``Settings()`` reads (``path``, relative to the
    working directory), none if there is no such file: pydantic ignores the unknown
    ``MEMSTRATA_*`` ones there as in the environment, so they are checked the same way."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values  # pydantic-settings' own reader of the file

    return {name: value or "" for name, value in dotenv_values(path, encoding="utf-8").items()}


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``MEMSTRATA_*`` variables that name no setting, each with the closest setting's
    variable (or None): pydantic ignores them, so a misspelling would go unnoticed."""
    known = [f"MEMSTRATA_{name.upper()}" for name in Settings.model_fields]
    return [
        (name, next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.8)), None))
        for name in sorted(environ)
        if name.startswith("MEMSTRATA_") and name not in known and name not in TOOLING_VARIABLES
    ]


# The most bytes a JSON body spends on one byte of a file's UTF-8: a control character
# escaped as \u00XX (a quote or backslash takes 2; a client that escapes non-ASCII, as
# Python's json does, 3 for each byte of a 2- or 4-byte character).
JSON_ESCAPE_BYTES = 6
# Room in a memory file's PUT body beside its content: the keys, expected_version, spaces.
FILE_BODY_ROOM = 4096


def file_request_bytes(settings: Settings, files: int = 1) -> int:
    """The body limit of a request that carries ``files`` memory files (a file's PUT and
    MCP's whole-file calls: one; the page's merge: three texts): a file at
    ``max_content_bytes`` always fits, however its JSON escapes it (a file of ``"``
    characters is a body twice its size, one of control characters six times), and the
    content itself, once decoded, is what the file limit is measured against (413 above
    it). Never below ``max_request_bytes``."""
    worst = files * JSON_ESCAPE_BYTES * settings.max_content_bytes + FILE_BODY_ROOM
    return max(settings.max_request_bytes, worst)
