"""The secret settings — the database URL's password, the embedding API keys, the JWT
secrets — stay out of ``repr()``/``str()``/``model_dump_json()`` of ``Settings``, of an
``EmbeddingModelSpec`` and of ``repr(Memstrata)`` (a host logging its configuration, or a
traceback's locals, used to print them), while every caller still reads the real value."""

from __future__ import annotations

from pathlib import Path

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.runtime import Memstrata

PASSWORD = "hunter2pw-db"
API_KEY = "sk-SECRETKEY-embedding"
SPEC_KEY = "sk-SECRETKEY-spec"
JWT = "jwt-secret-value-of-32-characters-or-more-0123"
ROTATED = "jwt-rotated-secret-of-32-characters-or-more-45"
SECRETS = (PASSWORD, API_KEY, SPEC_KEY, JWT, ROTATED)


def _leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def _settings(tmp_path: Path) -> Settings:
    spec = EmbeddingModelSpec(name="m", base_url="http://127.0.0.1:1/v1", api_key=SPEC_KEY)
    return Settings(
        environment="test",
        data_dir=tmp_path,
        database_url=f"postgresql://memuser:{PASSWORD}@127.0.0.1:1/db",
        embedding_api_key=API_KEY,
        embedding_models=[spec],
        jwt_secret=JWT,
        jwt_rotation_secrets=[ROTATED],
    )


def test_settings_and_specs_show_no_secret(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    spec = settings.embedding_models[0]
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert _leaked(shown) == [], shown
    for shown in (repr(spec), str(spec), spec.model_dump_json()):
        assert _leaked(shown) == [], shown
    # What is shown instead says which URL and that a password is set.
    assert "postgresql+psycopg://memuser:***@127.0.0.1:1/db" in repr(settings)
    # The callers read the real values, unchanged.
    assert settings.database_url == f"postgresql+psycopg://memuser:{PASSWORD}@127.0.0.1:1/db"
    assert settings.external_database_url is not None
    assert PASSWORD in settings.external_database_url
    assert f"{settings.embedding_api_key}" == API_KEY
    assert settings.jwt_secret == JWT and settings.jwt_rotation_secrets == [ROTATED]
    assert spec.api_key == SPEC_KEY
    assert settings.model_dump()["jwt_secret"] == JWT  # Python values stay the real ones
    # A spec passed on as JSON on purpose (e.g. to a child process) keeps its key.
    revealed = spec.model_dump_json(context={"reveal_secrets": True})
    assert SPEC_KEY in revealed
    assert EmbeddingModelSpec.model_validate_json(revealed).api_key == SPEC_KEY


def test_a_runtime_shows_no_secret(pg_url: str, tmp_path: Path) -> None:
    settings = Settings(
        environment="test",
        data_dir=tmp_path,
        database_url=pg_url,
        embedding_base_url="http://127.0.0.1:1/v1",  # never called: no write, no search
        embedding_model="m",
        embedding_api_key=API_KEY,
        embedding_autostart=False,
        jwt_secret=JWT,
    )
    with Memstrata.open(settings) as mem:  # the embedder built from the settings
        assert mem.embedder is not None
        assert _leaked(repr(mem)) == []
