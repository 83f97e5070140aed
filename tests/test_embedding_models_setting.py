"""A wrong entry inside ``MEMSTRATA_EMBEDDING_MODELS`` says what is wrong, where, and what a
right one looks like.

Pydantic's own answers ("Input should be a valid dictionary or instance of
EmbeddingModelSpec", "Field required", "Extra inputs are not permitted") named neither
the fix nor an example; each now ends with a valid entry to copy. The setting and the
entry's position are the error's location: ``MEMSTRATA_EMBEDDING_MODELS[1].name`` on the
command line, ``embedding_models.1.name`` in pydantic's ``ValidationError``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.config_lists import EMBEDDING_MODEL_EXAMPLE, LIST_EXAMPLES
from tests.cli.cli_env import clean_env, run_cli

VARIABLE = "MEMSTRATA_EMBEDDING_MODELS"
VALID = f"a valid entry: '{EMBEDDING_MODEL_EXAMPLE}'"
GOOD = {"name": "m", "base_url": "http://127.0.0.1:8808/v1"}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_LOG_JSON": "false"},
    )


def error_line(monkeypatch: pytest.MonkeyPatch, value: object) -> str:
    """The one line ``memstrata token`` fails with (settings are read first)."""
    monkeypatch.setenv(VARIABLE, json.dumps(value))
    code, _out, err = run_cli("token", "--user", "alice")
    assert code == 1, err
    return err.strip()


def test_the_example_entry_is_valid_and_is_the_list_settings_example() -> None:
    entry = json.loads(EMBEDDING_MODEL_EXAMPLE)
    assert json.loads(LIST_EXAMPLES["embedding_models"]) == [entry]
    assert Settings(embedding_models=[entry]).embedding_models[0].name == entry["name"]


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        pytest.param(
            [1],
            [f"{VARIABLE}[0]: must be a JSON object, one model; got a JSON number; {VALID}"],
            id="a number",
        ),
        pytest.param(
            [[GOOD]],
            [f"{VARIABLE}[0]: must be a JSON object, one model; got a JSON list; {VALID}"],
            id="a list in the list",
        ),
        pytest.param(
            [{}],
            [f"{VARIABLE}[0]: missing name and base_url, which every model needs; {VALID}"],
            id="an empty object",
        ),
        pytest.param(
            [{"name": 3}],
            [
                f"{VARIABLE}[0].name: must be a JSON string; got a JSON number",
                f"{VARIABLE}[0]: missing base_url (every model needs name and base_url); {VALID}",
            ],
            id="a number for a name, no base_url",
        ),
        pytest.param(
            [GOOD, {"name": "second"}],
            [
                f"{VARIABLE}[1]: missing base_url (every model needs name and base_url); {VALID}",
            ],
            id="the second entry",
        ),
        pytest.param(
            [{**GOOD, "query_input_typ": "query"}],
            [
                f"{VARIABLE}[0].query_input_typ: not a key this setting takes; check its "
                f"spelling (did you mean query_input_type?); {VALID}"
            ],
            id="a misspelt key",
        ),
        pytest.param(
            [{**GOOD, "colour": "red"}],
            [
                f"{VARIABLE}[0].colour: not a key this setting takes; check its spelling (a "
                "model takes name, base_url, api_key, dimensions, query_input_type, "
                f"passage_input_type, query_base_url, keepalive); {VALID}"
            ],
            id="an unknown key",
        ),
        pytest.param(
            [{**GOOD, "dimensions": "384d"}],
            [f"{VARIABLE}[0].dimensions: must be a whole number; got a JSON string; {VALID}"],
            id="a word for a number",
        ),
        pytest.param(
            [{**GOOD, "dimensions": 1.5}],
            [f"{VARIABLE}[0].dimensions: must be a whole number; got 1.5; {VALID}"],
            id="a fraction for a whole number",
        ),
        pytest.param(
            [{**GOOD, "keepalive": 2}],
            [f"{VARIABLE}[0].keepalive: must be true or false; got 2; {VALID}"],
            id="a number for a boolean",
        ),
        pytest.param(
            [{**GOOD, "dimensions": 4096}],
            [f"{VARIABLE}[0].dimensions: must be 2560 or less; got 4096; {VALID}"],
            id="too many dimensions",
        ),
        pytest.param(
            [{**GOOD, "keepalive": "maybe"}],
            [f"{VARIABLE}[0].keepalive: must be true or false; got a JSON string; {VALID}"],
            id="not a boolean",
        ),
        pytest.param(
            [{**GOOD, "base_url": "localhost:8808/v1"}],
            [
                f"{VARIABLE}[0].base_url: must be an http:// or https:// URL, e.g. "
                f"http://127.0.0.1:8808/v1; got 'localhost:8808/v1'; {VALID}"
            ],
            id="a URL with no scheme",
        ),
        pytest.param(  # pydantic's lax mode took it as 1: every real vector refused
            [{**GOOD, "dimensions": True}],
            [f"{VARIABLE}[0].dimensions: must be a whole number; got a JSON boolean; {VALID}"],
            id="a boolean for dimensions",
        ),
        pytest.param(  # sent as each request's model and stored with every vector
            [{**GOOD, "name": " "}],
            [
                f"{VARIABLE}[0].name: must not be empty: the model's name, sent in each "
                f"request; {VALID}"
            ],
            id="an empty name",
        ),
        pytest.param(  # MEMSTRATA_EMBEDDING_MODEL chose the first: the second never ran
            [GOOD, {**GOOD, "base_url": "http://127.0.0.1:8809/v1"}],
            [
                f"{VARIABLE}[1].name: entry 0 has the name 'm' already: each model needs a "
                "name of its own (the one MEMSTRATA_EMBEDDING_MODEL chooses it by)"
            ],
            id="a name twice",
        ),
    ],
)
def test_a_wrong_entry_is_named_explained_and_shown_right(
    env: None, monkeypatch: pytest.MonkeyPatch, value: object, problems: list[str]
) -> None:
    line = error_line(monkeypatch, value)
    assert line == f"error: invalid configuration — {'; '.join(problems)}"


def test_the_library_gets_the_same_messages_at_the_entrys_location() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(embedding_models=[GOOD, {"name": 3}])  # type: ignore[list-item]
    assert [(error["loc"], error["msg"]) for error in caught.value.errors()] == [
        (("embedding_models", 1, "name"), "must be a JSON string; got a JSON number"),
        (
            ("embedding_models", 1),
            f"missing base_url (every model needs name and base_url); {VALID}",
        ),
    ]
    assert "embedding_models.1.name\n  must be a JSON string" in str(caught.value)


def test_each_wrong_entry_gets_its_own_example(env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    line = error_line(monkeypatch, [1, GOOD, {}])
    assert line == (
        f"error: invalid configuration — {VARIABLE}[0]: must be a JSON object, one model; "
        f"got a JSON number; {VALID}; {VARIABLE}[2]: missing name and base_url, which every "
        f"model needs; {VALID}"
    )


def test_a_value_that_is_no_list_keeps_its_own_message(
    env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = error_line(monkeypatch, GOOD)
    assert line.startswith(f"error: invalid configuration — {VARIABLE}: must be a JSON list")
