"""The app as a host runs it: its lifespan and logging, /metrics, request logs and ids, the
API prefix, mounting into a host app, the OpenAPI docs, OpenTelemetry."""

from __future__ import annotations

import asyncio
import logging
import os
import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from memstrata.api import create_app, create_router
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.retrieval.fault_server import FaultServer


def test_lifespan_opens_and_closes_the_runtime(settings: Settings, db: Database) -> None:
    app = create_app(settings)
    before = TestClient(app, raise_server_exceptions=False)
    response = before.get("/readyz")  # no lifespan yet: not ready, and says so
    assert response.status_code == 503
    assert response.json()["database"] == "starting"
    with TestClient(app) as client:
        assert client.get("/readyz").json()["status"] == "ready"
    assert before.get("/readyz").status_code == 503  # closed again


def test_the_apps_own_runtime_lets_a_cut_off_edit_land_before_it_closes(
    settings: Settings, db: Database
) -> None:
    """``uvicorn memstrata.api.app:create_app --factory``: the lifespan's shutdown comes
    after the server cancelled the requests still running. A memory-file edit cut off while
    embedding finishes in a task of its own; the runtime is drained (Memstrata.drain)
    before it is closed, so the edit's vectors and its mirror land; before, the closed
    runtime failed the embedding and the end of the event loop cancelled the mirror."""
    with FaultServer("slow") as fake:
        fake.delay_s = 0.3  # per text
        slow = fake.as_api_of(settings)
        app = create_app(slow)

        async def edit_cut_off_at_shutdown() -> None:
            async with app.router.lifespan_context(app):
                mem = app.state.context.mem
                edit = asyncio.create_task(
                    mem.sync.frontend_edit("fay", FileKind.MEMORY, "Sails on Lake Geneva\n")
                )
                await fake.called()
                edit.cancel()

        asyncio.run(edit_cut_off_at_shutdown())
    with db.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT content FROM user_memory WHERE user_id = 'fay' AND file_type = :t"),
            {"t": FileKind.MEMORY.file_type},
        ).scalar_one_or_none()
    assert stored is not None and "Sails on Lake Geneva" in stored
    # The write's follow-on steps ran too: its vectors, then the mirror into the sandbox.
    with db.engine.connect() as conn:
        vectors = conn.execute(
            text(
                "SELECT count(*) FROM memory_embeddings WHERE user_id = 'fay' "
                "AND file_path = 'MEMORY.md' AND embedding IS NOT NULL"
            )
        ).scalar_one()
    assert vectors >= 1
    mirrored = [p.read_text() for p in slow.sandbox_root.rglob("MEMORY.md")]
    assert any("Sails on Lake Geneva" in m for m in mirrored), mirrored


def test_the_factory_sets_up_the_services_logging_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``uvicorn memstrata.api.app:create_app --factory`` got neither the service's log
    format nor the warning for a misspelt variable: only the CLI set them up."""
    for name in [n for n in os.environ if n.startswith("MEMSTRATA_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEMSTRATA_ENVIRONMENT", "test")
    monkeypatch.setenv("MEMSTRATA_JWT_SECRET", "factory-test-secret-that-is-long-enough-0123")
    monkeypatch.setenv("MEMSTRATA_DECAY_FLOR", "0.5")
    with caplog.at_level(logging.WARNING):
        create_app()
    warned = [
        (f["name"], f["closest"])
        for f in map(event_fields, caplog.records)
        if f.get("event") == "config.unknown_variable"
    ]
    assert warned == [("MEMSTRATA_DECAY_FLOR", "MEMSTRATA_DECAY_FLOOR")]
    handlers = [h for h in logging.getLogger().handlers if getattr(h, "_memstrata", False)]
    assert len(handlers) == 1  # JSON lines on stderr, as under `memstrata serve`


def test_metrics(client: TestClient, auth: AuthHeader) -> None:
    client.get("/api/config/skills", headers=auth("alice"))
    client.get("/api/config/skills")
    client.get("/api/config/skills", headers=auth("bob"))
    client.post("/api/memory/search", headers=auth("alice"), json={"query": "hello"})
    client.get("/no/such/path")
    client.request("BREW", "/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    lines = set(response.text.splitlines())
    for expected in (
        'memstrata_http_requests_total{method="GET",route="/api/config/skills",status="200"} 2.0',
        'memstrata_http_requests_total{method="GET",route="/api/config/skills",status="401"} 1.0',
        'memstrata_http_requests_total{method="POST",route="/api/memory/search",status="200"} 1.0',
        'memstrata_http_requests_total{method="GET",route="<unmatched>",status="404"} 1.0',
        'memstrata_http_requests_total{method="OTHER",route="/healthz",status="405"} 1.0',
        'memstrata_http_request_duration_seconds_count{method="GET",route="/api/config/skills"}'
        " 3.0",
        'memstrata_searches_total{mode="bm25"} 1.0',
        "memstrata_search_hits_total 0.0",
    ):
        assert expected in lines, expected
    assert "alice" not in response.text  # no user ids in labels


def test_metrics_registries_are_per_app(mem: Memstrata) -> None:
    first, second = create_app(memstrata=mem), create_app(memstrata=mem)
    with TestClient(first) as client:
        client.get("/healthz")
    with TestClient(second) as client:
        body = client.get("/metrics").text
    assert 'route="/healthz"' not in body


def test_request_log_and_request_id(
    client: TestClient, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    # DEBUG: an answered /healthz is logged at DEBUG (test_observability.py).
    with caplog.at_level(logging.DEBUG, logger="memstrata.api.access"):
        response = client.get(
            "/api/config/skills", headers={**auth("alice"), "X-Request-ID": "r-1"}
        )
        generated = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert response.headers["x-request-id"] == "r-1"
    assert len(generated.headers["x-request-id"]) == 32
    again = client.get("/healthz").headers["x-request-id"]
    assert again != generated.headers["x-request-id"] and len(again) == 32
    records = [event_fields(r) for r in caplog.records if r.name == "memstrata.api.access"]
    first = records[0]
    logged_ms = first.pop("ms")
    assert logged_ms >= 0
    assert first == {
        "event": "http.request",
        "method": "GET",
        "path": "/api/config/skills",
        "route": "/api/config/skills",
        "status": 200,
        "user_id": "alice",
        "request_id": "r-1",
    }
    assert records[1]["user_id"] is None
    assert records[1]["request_id"] == generated.headers["x-request-id"]
    # Server-Timing: the app's own time, at most what the log line recorded.
    timing = response.headers["server-timing"]
    assert re.fullmatch(r"app;dur=\d+\.\d", timing), timing
    assert float(timing.split("=")[1]) <= logged_ms + 0.1


def test_api_prefix(settings: Settings, mem: Memstrata, auth: AuthHeader) -> None:
    prefixed = settings.model_copy(update={"api_prefix": "/mem"})
    app = create_app(prefixed, memstrata=mem)
    with TestClient(app) as client:
        assert client.get("/mem/api/config/skills", headers=auth()).status_code == 200
        assert client.get("/api/config/skills", headers=auth()).status_code == 404
        assert 'route="/mem/api/config/skills"' in client.get("/mem/metrics").text


def test_mounted_into_a_host_app(mem: Memstrata, auth: AuthHeader) -> None:
    host = FastAPI()  # no memstrata middleware or exception handlers
    host.include_router(create_router(mem, include_operations=False), prefix="/memory")
    with TestClient(host) as client:
        assert client.get("/memory/api/config/skills", headers=auth()).status_code == 200
        missing = client.get("/memory/api/config/skills")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == 'Bearer realm="memstrata"'
        bad = client.get("/memory/api/config/agent-files/agents", headers=auth())
        assert (bad.status_code, bad.json()["detail"]) == (400, "无效的文件名")
        invalid = client.put("/memory/api/config/skills/web_search", headers=auth(), json={})
        assert invalid.status_code == 422
        assert invalid.json()["detail"] == "invalid request: missing required field: enabled"
        assert client.get("/memory/healthz").status_code == 404


def test_openapi_docs(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    put = schema["paths"]["/api/config/agent-files/{name}"]["put"]
    assert set(put["responses"]) >= {"200", "400", "401", "409", "413", "422", "503"}
    # A read has no body and no version: it never answers 404, 409 or 413.
    get = schema["paths"]["/api/config/agent-files/{name}"]["get"]
    assert set(get["responses"]) & {"404", "409", "413"} == set()
    # Nor a 422: FastAPI adds one, in a shape memstrata never sends, to any route with a
    # parameter; every 422 memstrata sends is an ErrorBody (or, for the batch, either that
    # or its own body: tests/api/test_openapi_answers.py).
    assert "422" not in get["responses"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    for methods in schema["paths"].values():
        for operation in methods.values():
            if "422" in operation["responses"]:
                ref = operation["responses"]["422"]["content"]["application/json"]["schema"]
                refs = [r["$ref"] for r in ref.get("anyOf", [ref])]
                names = {r.rsplit("/", 1)[1] for r in refs}
                assert names <= {"ErrorBody", "BatchTurnsRejected"}, names
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if path.startswith("/api/") and not path.endswith("/limits"):
                # Each reaches the database (or the sandbox, or the embedding API).
                assert "503" in operation["responses"], (method, path)


def test_every_route_has_a_typed_response_schema(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if path.endswith("/metrics"):
                continue  # Prometheus text, not JSON
            body = operation["responses"]["200"]["content"]["application/json"]["schema"]
            assert "$ref" in body, (method, path, body)  # a named model, not a bare object
    search = schema["components"]["schemas"]["SearchResults"]
    assert set(search["properties"]) == {"query", "mode", "hits", "timings_ms", "warnings"}
    hit = schema["components"]["schemas"]["SearchHitBody"]
    assert hit["properties"]["explain"] == {"$ref": "#/components/schemas/Explain"}
    assert "IndexReportBody" in schema["components"]["schemas"]


@pytest.mark.parametrize("enabled", [False, True])
def test_opentelemetry_lookup_only_when_enabled(
    settings: Settings, mem: Memstrata, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    """FastAPI looks for an OpenTelemetry provider on every request unless told not to;
    memstrata tells it not to unless MEMSTRATA_OTEL_TELEMETRY is on."""
    from opentelemetry import trace

    lookups: list[int] = []
    real = trace.get_tracer_provider

    def counting() -> trace.TracerProvider:
        lookups.append(1)
        return real()

    monkeypatch.setattr(trace, "get_tracer_provider", counting)
    app = create_app(settings.model_copy(update={"otel_telemetry": enabled}), memstrata=mem)
    with TestClient(app) as client:
        lookups.clear()
        assert client.get("/healthz").status_code == 200
    assert bool(lookups) is enabled
