"""Both OpenAPI documents, checked as tools other than ours read them.

openapi-spec-validator checks the documents (and, with jsonschema-rs beside
it, every pattern as an ECMA-262 regular expression); the rest checks what the
contract asks of them: every status and response header declared, no default
on an update body's field, request schemas as strict as the server. And /docs
works with no internet access. No database is needed: the documents are built
from the code.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re

import jsonschema_rs
import pytest
from openapi_spec_validator import validate

from cluster_svc import Settings as ClusterSettings
from cluster_svc import create_app as create_cluster_app
from platform_svc import Settings as PlatformSettings
from platform_svc import create_app as create_platform_app

NOWHERE = "postgresql+psycopg2://nobody@127.0.0.1:1/none"  # never connected to


@pytest.fixture(scope="module", params=["cluster_svc", "platform_svc"])
def app(request):
    if request.param == "cluster_svc":
        app = create_cluster_app(ClusterSettings(database_url=NOWHERE, internal_token="t"), testing=True)
    else:
        settings = PlatformSettings(database_url=NOWHERE, cluster_svc_url="http://127.0.0.1:1", internal_token="t")
        app = create_platform_app(settings, testing=True)
    yield app
    app.extensions["database"].dispose()


@pytest.fixture(scope="module")
def spec(app):
    return app.test_client().get("/openapi.json").get_json()


def operations(spec):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method != "parameters":
                yield path, method.upper(), operation


def response(spec, operation, status):
    answer = operation["responses"][str(status)]
    if "$ref" in answer:
        answer = spec["components"]["responses"][answer["$ref"].rsplit("/", 1)[-1]]
    return answer


def schema(spec, ref_or_schema):
    if "$ref" in ref_or_schema:
        return spec["components"]["schemas"][ref_or_schema["$ref"].rsplit("/", 1)[-1]]
    return ref_or_schema


def test_the_document_passes_openapi_spec_validator(spec):
    assert jsonschema_rs  # installed, so the validator checks patterns as ECMA-262
    validate(spec)  # raises with the first problem


def test_every_pattern_is_ecma262_without_python_only_syntax(spec):
    patterns = re.findall(r'"pattern": ("(?:[^"\\]|\\.)*")', json.dumps(spec))
    assert patterns
    for pattern in map(json.loads, patterns):
        assert not re.search(r"\\[AZz]|\(\?P<|\(\?[aiLmsux]", pattern), pattern
        assert pattern.startswith("^") and pattern.endswith("$"), pattern
        jsonschema_rs.validator_for({"type": "string", "pattern": pattern})  # compiles as ECMA-262


def public(operation):
    """Health and readiness: no token asked, so no 401 to declare."""
    return operation.get("security") == []


def test_every_operation_declares_the_errors_it_can_answer(spec):
    for path, method, operation in operations(spec):
        declared = set(operation["responses"])
        expected = {"400", "414", "503", "default"} | (set() if public(operation) else {"401"})
        if "requestBody" in operation:
            expected |= {"413", "415", "422"}
        if "{" in path:
            expected |= {"422"}
            if not path.endswith("/batch"):  # a batch answers a missing or deleted parent item by item
                expected |= {"404", "410"}
        assert expected <= declared, (method, path, expected - declared)


def test_error_answers_declare_their_headers(spec):
    for path, method, operation in operations(spec):
        if not public(operation):
            assert set(response(spec, operation, 401)["headers"]) == {"WWW-Authenticate", "X-Request-ID"}, path
        assert set(response(spec, operation, 503)["headers"]) == {"Retry-After", "X-Request-ID"}, (method, path)


def test_creates_declare_location_and_idempotent_replayed(spec):
    creates = [(path, op) for path, method, op in operations(spec) if method == "POST" and "batch" not in path]
    assert len(creates) == 2
    for path, operation in creates:
        def headers(status, operation=operation):  # besides the rate limit's (tested below)
            return {name for name in response(spec, operation, status)["headers"] if not name.startswith("RateLimit-")}

        # How far it got, and whether a Prefer: wait was honoured.
        status = {"Idempotency-Status", "Preference-Applied"} if spec["info"]["title"] == "platform_svc" else set()
        assert headers(201) == {"Location", "X-Request-ID", *status}, path
        assert headers(200) == {
            "Location",
            "Idempotent-Replayed",
            "X-Request-ID",
            *status,
        }, path
        assert {"409", "410"} & set(operation["responses"])


def test_no_field_of_an_update_body_has_a_default(spec):
    updates = [op for _, method, op in operations(spec) if method in ("PUT", "PATCH")]
    assert len(updates) == 2
    for operation in updates:
        body = schema(spec, operation["requestBody"]["content"]["application/json"]["schema"])
        assert body["properties"]
        assert all("default" not in field for field in body["properties"].values()), body


def test_patch_bodies_need_at_least_one_field(app, spec):
    patches = [op for _, method, op in operations(spec) if method == "PATCH"]
    for operation in patches:
        body = schema(spec, operation["requestBody"]["content"]["application/json"]["schema"])
        assert body["minProperties"] == 1
        assert body["additionalProperties"] is False


def test_request_fields_say_what_the_server_accepts(spec):
    schemas = spec["components"]["schemas"]
    rule_create = next(s for name, s in schemas.items() if name == "FirewallRuleCreate")
    cidr, description = rule_create["properties"]["cidr"], rule_create["properties"]["description"]
    assert cidr["format"] == "cidr" and cidr["pattern"] and cidr["maxLength"]
    assert description["maxLength"] == 255 and description["pattern"] == "^[^\\u0000]*$"
    name = schemas["ClusterCreate"]["properties"]["name"]
    assert name["pattern"] == "^[a-z0-9-]{1,63}$"


def test_the_name_pattern_and_the_server_agree_on_a_trailing_newline():
    from marshmallow import ValidationError

    from shared.contract import CLUSTER_NAME

    assert CLUSTER_NAME("main-db") == "main-db"
    for refused in ("main-db\n", "main-db\r\n", "", "a" * 64, "Main"):
        with pytest.raises(ValidationError):
            CLUSTER_NAME(refused)
    ecma = jsonschema_rs.validator_for({"type": "string", "pattern": CLUSTER_NAME.regex.pattern})
    assert ecma.is_valid("main-db") and not ecma.is_valid("main-db\n")


def test_docs_load_swagger_ui_from_the_service_itself(app):
    client = app.test_client()
    page = client.get("/docs")

    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "something is loaded from another host"
    assets = re.findall(r"(?:src|href)=\"(/[^\"]+)\"", html)
    assert {a.rsplit("/", 1)[-1] for a in assets} >= {"swagger-ui-bundle.js", "swagger-ui.css"}
    for asset in assets:
        answer = client.get(asset)  # no Authorization: the docs are public
        assert answer.status_code == 200, asset
        assert len(answer.get_data()) > 1000
        answer.close()


def test_the_docs_page_runs_only_its_own_scripts_and_cannot_be_framed(app):
    page = app.test_client().get("/docs")
    policy = page.headers["Content-Security-Policy"]
    inline = re.search(r"<script>(.*?)</script>", page.get_data(as_text=True), re.DOTALL).group(1)
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()

    assert f"script-src 'self' 'sha256-{digest}';" in policy and "unsafe-inline' ; " not in policy
    assert "'unsafe-eval'" not in policy and "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert page.headers["X-Frame-Options"] == "DENY"


def texts(node, key=None):
    """Every (key, string) pair in the document, wherever it sits."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from texts(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from texts(value, key)
    elif isinstance(node, str):
        yield key, node


def test_descriptions_are_commonmark_with_no_rst_double_backticks(spec):
    """Swagger UI renders descriptions and summaries as CommonMark: ``x`` would show its backticks."""
    prose = [text for key, text in texts(spec) if key in ("description", "summary")]
    assert prose
    assert [text for text in prose if "``" in text] == []


def test_public_operations_declare_the_rate_limit(app, spec):
    """platform_svc's public operations answer 429 too_many_requests, with Retry-After, and every answer to a
    request let in carries the RateLimit fields; cluster_svc (internal, not limited) declares neither."""
    limited = [(path, method, op) for path, method, op in operations(spec) if path.startswith("/v1/")]
    rate_limit = {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"}
    if app.name != "platform_svc":
        assert all("429" not in op["responses"] for _, _, op in limited)
        return
    assert len(limited) == 10
    for path, method, operation in limited:
        assert set(response(spec, operation, 429)["headers"]) == {"Retry-After", "X-Request-ID", *rate_limit}, path
        successes = [status for status in operation["responses"] if status.startswith("2")]
        assert successes, (method, path)
        for status in successes:
            assert rate_limit <= set(response(spec, operation, status)["headers"]), (method, path, status)
    assert "429" not in next(op for path, _, op in operations(spec) if path == "/metrics")["responses"]
