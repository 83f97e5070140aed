"""POST /api/memory/search with ``"marks": true``: each hit carries the stretches of its
text to mark (``retrieval.hit_marks``, UTF-16 offsets); without it the answer is the
spec's, with no ``marks`` key at all."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.auth import AuthHeader

SEARCH = "/api/memory/search"
SAID = "I 👍 keep bees on the roof; 每天喝乌龙茶"


def _index(client: TestClient, auth: AuthHeader) -> None:
    turn = {"turn_index": 0, "user_message": SAID, "assistant_reply": "Noted."}
    done = client.post("/api/memory/conversations/s1/turns", headers=auth(), json=turn)
    assert done.status_code == 200, done.text


def _marked(text: str, spans: list[list[int]]) -> list[str]:
    units = text.encode("utf-16-le")
    return [units[2 * s : 2 * e].decode("utf-16-le") for s, e in spans]


def test_marks_are_given_only_when_asked(client: TestClient, auth: AuthHeader) -> None:
    _index(client, auth)
    plain = client.post(SEARCH, headers=auth(), json={"query": "bee 乌龙茶"})
    assert plain.status_code == 200, plain.text
    assert plain.json()["hits"], plain.text
    assert all("marks" not in hit for hit in plain.json()["hits"])

    asked = client.post(SEARCH, headers=auth(), json={"query": "bee 乌龙茶", "marks": True})
    assert asked.status_code == 200, asked.text
    [hit] = [h for h in asked.json()["hits"] if SAID in h["text"]]
    assert _marked(hit["text"], hit["marks"]) == ["bees", "乌龙茶"]
    # the rest of the hit is as without marks (its score decays by the second)
    [before] = [h for h in plain.json()["hits"] if SAID in h["text"]]
    assert set(hit) - set(before) == {"marks"}
    assert (hit["text"], hit["file_path"]) == (before["text"], before["file_path"])

    off = client.post(SEARCH, headers=auth(), json={"query": "bee", "marks": False})
    assert all("marks" not in hit for hit in off.json()["hits"])


def test_marks_of_the_wrong_type_get_the_api_s_boolean_refusal(
    client: TestClient, auth: AuthHeader
) -> None:
    response = client.post(SEARCH, headers=auth(), json={"query": "bee", "marks": "yes"})
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"
    assert response.json()["detail"] == (
        'invalid request: marks must be true or false (a JSON boolean); got "yes"'
    )


def test_the_schema_documents_marks(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    asked = schemas["SearchRequest"]["properties"]["marks"]
    assert (asked["type"], asked["default"]) == ("boolean", False)
    hit = next(v for k, v in schemas.items() if k.startswith("SearchHitBody"))
    assert "UTF-16" in hit["properties"]["marks"]["description"]
    assert "marks" not in hit.get("required", [])
