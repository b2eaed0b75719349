"""Every error is JSON `{error, message}`; the OpenAPI document declares it all."""

import pytest

from tests.conftest import auth

P = "/api/public/v1"


def test_unknown_path_and_method_are_json(client, world):
    org = world.org()
    raw, _ = world.key(org)
    r = client.get(f"{P}/nothing-here", headers=auth(raw))
    assert r.status_code == 404 and r.json == {"error": "not_found", "message": "Not found."}
    r = client.get("/nothing-here")  # outside the API: no key needed, still JSON
    assert r.status_code == 404 and r.json == {"error": "not_found", "message": "Not found."}
    r = client.put(f"{P}/projects", headers=auth(raw))
    assert r.status_code == 405 and r.json["error"] == "method_not_allowed"
    assert "GET" in r.headers["Allow"]


def test_malformed_json_body_is_400(client, world):
    org = world.org()
    raw, _ = world.key(org)
    r = client.post(f"{P}/projects", headers={**auth(raw), "Content-Type": "application/json"},
                    data="{not json")
    assert r.status_code == 400 and r.json["error"] == "bad_request"
    assert r.content_type == "application/json"


def test_oversized_body_is_413(client, world):
    org = world.org()
    raw, _ = world.key(org)
    r = client.post(f"{P}/projects", headers={**auth(raw), "Content-Type": "application/json"},
                    data=b'{"name": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    assert r.status_code == 413 and r.json["error"] == "payload_too_large"


def test_healthz_needs_no_auth(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json == {"status": "ok"}


def test_unexpected_exception_is_json_500_without_trace(app, world):
    from control_plane.api.public import projects

    org = world.org()
    raw, _ = world.key(org)
    original = projects.svc.get_project
    projects.svc.get_project = lambda *a: 1 / 0
    try:
        app.config["PROPAGATE_EXCEPTIONS"] = False
        r = app.test_client().get(f"{P}/projects/00000000-0000-0000-0000-000000000001",
                                  headers=auth(raw))
    finally:
        projects.svc.get_project = original
    assert r.status_code == 500
    assert r.json == {"error": "internal_error", "message": "Internal error."}
    assert b"Traceback" not in r.data and b"ZeroDivision" not in r.data


@pytest.fixture
def spec(client):
    r = client.get(f"{P}/openapi.json")
    assert r.status_code == 200
    return r.json


def test_openapi_lists_every_public_operation(spec):
    paths = spec["paths"]
    for path, methods in {
        "/api/public/v1/projects": {"get", "post"},
        "/api/public/v1/projects/{project_id}": {"get", "patch", "delete"},
        "/api/public/v1/servers": {"get"},
        "/api/public/v1/support/tickets": {"get"},
        "/api/public/v1/support/tickets/{ticket_id}": {"get"},
        "/api/public/v1/changelog": {"get"},
        "/api/public/v1/servers/{server_id}/metrics": {"get"},
        "/api/public/v1/servers/registration-tokens": {"get", "post"},
        "/api/public/v1/servers/registration-tokens/{token_id}": {"delete"},
        "/api/public/v1/environments/{env_id}/metrics": {"get"},
        "/api/public/v1/environments/{env_id}/runtime-logs": {"get"},
    }.items():
        assert methods <= set(paths[path]), path


def test_openapi_declares_errors_and_rate_limit_headers(spec):
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method == "parameters":
                continue
            responses = op["responses"]
            for status in ("401", "403", "404", "422", "429"):
                assert status in responses, (path, method, status)
            ok = next(v for k, v in responses.items() if k.startswith("2"))
            assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Window",
                    "X-API-Key-Id"} <= set(ok.get("headers", {})), (path, method)
    error = spec["components"]["schemas"]["BerthError"]
    assert {"error", "message"} <= set(error["required"])
    assert {"bearerAuth", "apiKeyHeader"} == set(spec["components"]["securitySchemes"])


def test_interactive_docs_are_served(client):
    for path in ("/docs", "/redoc"):
        r = client.get(f"{P}{path}")
        assert r.status_code == 200 and b"openapi.json" in r.data


IDEMPOTENT_POSTS = {
    "/api/public/v1/projects",
    "/api/public/v1/projects/{project_id}/environments",
    "/api/public/v1/environments/{env_id}/actions/{action}",
    "/api/public/v1/webhooks",
    # Beyond the spec's list: creating and running automation rules (docs/decisions.md).
    "/api/public/v1/projects/{project_id}/automation-rules",
    "/api/public/v1/automation-rules/{rule_id}/run",
    "/api/public/v1/notification-channels",
}


def _header_params(op):
    return {p["name"]: p for p in op.get("parameters", []) if p.get("in") == "header"}


def test_openapi_declares_idempotency_headers_on_exactly_the_idempotent_posts(spec):
    declared = set()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method == "parameters":
                continue
            param = _header_params(op).get("X-Idempotency-Key")
            ok = {k: v for k, v in op["responses"].items() if k.startswith("2")}
            replayed = [k for k, v in ok.items() if "X-Idempotency-Replayed" in v.get("headers", {})]
            if param is None:
                assert not replayed, (path, method)
                continue
            declared.add(path)
            assert method == "post", (path, method)
            assert param["required"] is False
            assert param["schema"] == {"type": "string", "minLength": 1, "maxLength": 255}
            assert replayed == list(ok), (path, method)  # on every 2xx response
            header = ok[replayed[0]]["headers"]["X-Idempotency-Replayed"]
            assert header["schema"]["type"] == "string"
    assert declared == IDEMPOTENT_POSTS
    # Not on the POSTs that ignore it, nor on reads (rule 6).
    assert "X-Idempotency-Key" not in _header_params(
        spec["paths"]["/api/public/v1/webhooks/{webhook_id}/rotate-secret"]["post"])
    assert "X-Idempotency-Key" not in _header_params(spec["paths"]["/api/public/v1/projects"]["get"])
    # The internal marker does not leak into the document.
    assert "x-idempotent" not in str(spec)


def test_openapi_declares_retry_after_on_429(spec):
    error429 = spec["components"]["responses"]["Error429"]
    assert error429["headers"]["Retry-After"]["schema"] == {"type": "integer"}
    for status, response in spec["components"]["responses"].items():
        if status != "Error429":
            assert "Retry-After" not in response.get("headers", {}), status
