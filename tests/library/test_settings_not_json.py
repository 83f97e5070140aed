"""A list setting whose value is not JSON, read by the library: an ``InvalidSettingError``
naming the variable, like every other bad setting, with the CLI's message and without
the value (which may be a secret).

``Settings()`` let pydantic-settings' bare ``SettingsError`` out ("error parsing value for
field ... from source ..."), its cause quoting nothing useful and its traceback the
value's frames; only the CLI turned it into a clear line. The error is also still a
``SettingsError``, so a host's ``except SettingsError`` keeps working.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from memstrata import errors
from memstrata.config import Settings
from memstrata.config_lists import LIST_EXAMPLES
from tests.cli.cli_env import clean_env, run_cli

# A rotation secret cut short: what an operator's broken quoting looks like.
SECRET = "hunter2-rotated-out-yet-still-a-secret-0123"
BROKEN = f'["{SECRET}'
VARIABLE = "MEMSTRATA_JWT_ROTATION_SECRETS"
PROBLEM = (
    "not valid JSON (Unterminated string starting at: line 1 column 2 (char 1)); "
    f"list and object settings take JSON, e.g. '{LIST_EXAMPLES['jwt_rotation_secrets']}'"
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(tmp_path / "data")})
    return tmp_path


def not_json() -> ValidationError:
    """What ``Settings()`` raises, which must be the not-JSON error."""
    with pytest.raises(errors.InvalidSettingError) as caught:
        Settings()
    return caught.value


def test_a_variable_that_is_not_json_is_an_invalid_setting_naming_it(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VARIABLE, BROKEN)
    error = not_json()
    assert isinstance(error, errors.SettingNotJSONError)  # the documented subclass
    assert isinstance(error, SettingsError)  # a host's older except clause still catches it
    assert isinstance(error, errors.MemstrataError) and isinstance(error, ValueError)
    assert str(error).splitlines()[0] == f"invalid settings: {VARIABLE}"
    [detail] = error.errors()
    assert (detail["loc"], detail["msg"]) == (("jwt_rotation_secrets",), PROBLEM)


def test_the_value_is_shown_nowhere(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not in the message, its repr, its details, nor in the traceback a host logs (the
    JSON decoder's error holds the whole value, and its frames the variable)."""
    monkeypatch.setenv(VARIABLE, BROKEN)
    error = not_json()
    shown = [str(error), repr(error), repr(error.errors()), *traceback.format_exception(error)]
    assert not [text for text in shown if SECRET in text]
    assert error.__cause__ is None and error.__context__ is None


def test_the_env_file_is_read_alike(env: Path) -> None:
    (env / ".env").write_text("MEMSTRATA_SKILL_DIRS=[oops\n", encoding="utf-8")
    error = not_json()
    assert str(error).splitlines()[0] == "invalid settings: MEMSTRATA_SKILL_DIRS"
    assert error.errors()[0]["msg"].endswith(f"e.g. '{LIST_EXAMPLES['skill_dirs']}'")


def test_the_cli_says_the_same(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule for the message: the CLI's line is the library error's, on one line."""
    monkeypatch.setenv(VARIABLE, BROKEN)
    code, _out, err = run_cli("token", "--user", "alice")
    assert code == 1
    assert err.strip() == f"error: invalid configuration — {VARIABLE}: {PROBLEM}"
    assert SECRET not in err
