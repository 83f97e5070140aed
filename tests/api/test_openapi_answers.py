"""Real answers validate against the served OpenAPI document (JSON Schema 2020-12, ``$ref``s
resolved into the document): a client generated from it must accept what the API sends.

The batch route's 422 has two shapes — the request's own shape is wrong (generic
``{loc, msg, type}`` errors) or turns are invalid (``BatchTurnsRejected``) — and the
document once allowed only the second.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from memstrata.retrieval.rounds import MAX_BATCH_TURNS
from tests.api.auth import AuthHeader

BATCH = "/api/memory/conversations/turns:batch"
DOC_URI = "urn:memstrata-openapi"


def _validator(doc: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        DOC_URI, Resource.from_contents(doc, default_specification=DRAFT202012)
    )
    rooted = json.loads(json.dumps(schema).replace('"#/components', f'"{DOC_URI}#/components'))
    return Draft202012Validator(rooted, registry=registry)


def _problems(client: TestClient, path: str, answer: Any) -> list[str]:
    doc = client.get("/openapi.json").json()
    documented = doc["paths"][path]["post"]["responses"][str(answer.status_code)]
    schema = documented["content"]["application/json"]["schema"]
    return [
        f"{list(e.path)}: {e.message}" for e in _validator(doc, schema).iter_errors(answer.json())
    ]


def _turn(index: int, **fields: Any) -> dict[str, Any]:
    return {"session_id": "s", "turn_index": index, "user_message": "hi", **fields}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"turnz": []}, id="no-turns"),
        pytest.param({"turns": [_turn(i) for i in range(MAX_BATCH_TURNS + 1)]}, id="too-many"),
        pytest.param({"turns": [_turn(0)], "embed": "later"}, id="bad-embed"),
        pytest.param({"turns": [_turn(0, session_id="a/b")]}, id="invalid-turn"),
        pytest.param({"turns": [_turn(0, turn_index=-1), _turn(1, extra=1)]}, id="two-invalid"),
    ],
)
def test_every_batch_422_is_the_documented_shape(
    client: TestClient, auth: AuthHeader, body: dict[str, Any]
) -> None:
    answer = client.post(BATCH, headers=auth(), json=body)
    assert answer.status_code == 422, answer.text
    assert _problems(client, BATCH, answer) == []


def test_a_per_turn_422_names_the_turns(client: TestClient, auth: AuthHeader) -> None:
    """The union does not make the per-turn shape vaguer: its errors still name each turn."""
    answer = client.post(BATCH, headers=auth(), json={"turns": [_turn(0, session_id="a/b")]})
    assert answer.status_code == 422
    (error,) = answer.json()["errors"]
    assert (error["index"], error["session_id"], error["turn_index"]) == (0, "a/b", 0)


def _response(doc: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``response``, or the shared one its ``$ref`` names (``#/components/responses/…``)."""
    ref = response.get("$ref")
    if ref is None:
        return response
    found: dict[str, Any] = doc["components"]["responses"][ref.rsplit("/", 1)[1]]
    return found


@pytest.mark.parametrize(
    ("method", "path", "documented"),
    [
        ("DELETE", "/healthz", "/healthz"),
        ("POST", "/api/config/agent-files/user", "/api/config/agent-files/{name}"),
        ("GET", BATCH, BATCH),
    ],
)
def test_a_405_is_the_documented_shape(
    client: TestClient, auth: AuthHeader, method: str, path: str, documented: str
) -> None:
    answer = client.request(method, path, headers=auth())
    assert answer.status_code == 405, answer.text
    doc = client.get("/openapi.json").json()
    for operation in doc["paths"][documented].values():
        response = _response(doc, operation["responses"]["405"])
        schema = response["content"]["application/json"]["schema"]
        assert [e.message for e in _validator(doc, schema).iter_errors(answer.json())] == []
        assert "Allow" in response["headers"] and answer.headers["allow"]


def test_every_operation_documents_its_paths_405(client: TestClient) -> None:
    """Any path answers 405 to a method none of its routes takes (with ``Allow``)."""
    doc = client.get("/openapi.json").json()
    missing = [
        f"{method.upper()} {path}"
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
        if "405" not in operation["responses"]
    ]
    assert missing == []


def test_the_metrics_content_type_is_documented(client: TestClient) -> None:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    doc = client.get("/openapi.json").json()
    content = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(content) == [answer.headers["content-type"]]
    assert content[answer.headers["content-type"]]["schema"] == {"type": "string"}
