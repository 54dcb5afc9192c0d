"""Bad input is always a 4xx problem+json naming what is wrong, never a 5xx;
and nobody without the internal token gets in."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.pair import TOKEN
from tooling.testing import assert_problem, db_row

NIL = "00000000-0000-0000-0000-000000000000"
SOME = "3f1c2a7e-9b4d-4c1a-8e2f-5a6b7c8d9e0f"  # a valid UUID nobody uses

# Every route that needs the token, with a body that would be valid.
ROUTES = [
    ("GET", "/v1/clusters", None),
    ("POST", "/v1/clusters", "cluster"),
    ("GET", "/v1/clusters/{id}", None),
    ("PUT", "/v1/clusters/{id}", "cluster_update"),
    ("DELETE", "/v1/clusters/{id}", None),
    ("GET", "/v1/clusters/{id}/firewall-rules", None),
    ("POST", "/v1/clusters/{id}/firewall-rules", "rule"),
    ("GET", "/v1/clusters/{id}/firewall-rules/{rule_id}", None),
    ("PUT", "/v1/clusters/{id}/firewall-rules/{rule_id}", "rule_update"),
    ("DELETE", "/v1/clusters/{id}/firewall-rules/{rule_id}", None),
    ("GET", "/v1/firewall-rules", None),
]


def valid_body(kind):
    return {
        None: None,
        "cluster": internal_cluster_body(),
        "cluster_update": {"generation": 2, "name": "a", "plan": "hobby-0", "storage_gb": 10},
        "rule": internal_rule_body(),
        "rule_update": {"generation": 2, "description": "x"},
    }[kind]


def route_id(route):
    return f"{route[0]} {route[1]}"


# --- path parameters ------------------------------------------------------

BAD_PATH_IDS = ["not-a-uuid", NIL, "1234", SOME + "0", SOME.replace("-", "")[:-1] + "g"]


def bad_path_cases():
    for method, template, kind in ROUTES:
        for where in ("id", "rule_id"):
            if "{" + where + "}" in template:
                for bad in BAD_PATH_IDS:
                    path = template.format(**{"id": SOME, "rule_id": SOME, where: bad})
                    yield pytest.param(method, path, kind, id=f"{method} {path}")


@pytest.mark.parametrize(("method", "path", "kind"), list(bad_path_cases()))
def test_malformed_or_nil_uuid_in_path_is_422(client, method, path, kind):
    response = client.open(path, method=method, json=valid_body(kind))

    body = assert_problem(response, 422, "validation_error")
    assert body["errors"]["path"]


# --- cluster create bodies ------------------------------------------------

MISSING = object()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        # malformed and nil UUIDs
        ("id", "not-a-uuid"),
        ("id", NIL),
        ("id", 12345),
        ("id", None),
        ("team_id", "zzzz"),
        ("team_id", NIL),
        ("team_id", ["a"]),
        # missing required fields
        ("team_id", MISSING),
        ("name", MISSING),
        ("region", MISSING),
        ("postgres_version", MISSING),
        ("plan", MISSING),
        ("storage_gb", MISSING),
        # wrong types
        ("storage_gb", "100"),
        ("storage_gb", True),
        ("storage_gb", 100.0),
        ("storage_gb", 100.5),
        ("storage_gb", None),
        ("postgres_version", "16"),
        ("postgres_version", False),
        ("postgres_version", 16.0),
        ("generation", "1"),
        ("generation", True),
        ("generation", 1.0),
        ("name", 123),
        ("region", 1),
        ("plan", {"size": 2}),
        # out of range
        ("storage_gb", 9),
        ("storage_gb", 4097),
        ("storage_gb", -1),
        ("postgres_version", 13),
        ("postgres_version", 18),
        ("generation", 0),
        ("generation", -1),
        ("generation", 2**31),
        # unknown choices
        ("region", "mars-north-1"),
        ("region", "EU-WEST-1"),
        ("plan", "enterprise-64"),
        # invalid names
        ("name", "Main-DB"),
        ("name", "a" * 64),
        ("name", ""),
        ("name", "has space"),
        ("name", "under_score"),
        ("name", "caf\u00e9"),
        ("name", "db\x00"),
        ("name", "main-db\n"),
        ("name", "a" * 63 + "\n"),
    ],
)
def test_invalid_cluster_field_is_422_naming_it(client, engine, field, value):
    body = internal_cluster_body()
    if value is MISSING:
        del body[field]
    else:
        body[field] = value

    response = client.post("/v1/clusters", json=body)

    problem = assert_problem(response, 422, "validation_error")
    assert list(problem["errors"]["json"]) == [field]
    assert problem["errors"]["json"][field]
    if field != "id":
        assert db_row(engine, "clusters", body["id"]) is None


def test_missing_id_is_422(client):
    body = internal_cluster_body()
    del body["id"]

    problem = assert_problem(client.post("/v1/clusters", json=body), 422, "validation_error")

    assert problem["errors"]["json"] == {"id": ["Missing data for required field."]}


def test_empty_object_names_every_required_field(client):
    problem = assert_problem(client.post("/v1/clusters", json={}), 422, "validation_error")

    assert set(problem["errors"]["json"]) == {
        "id", "team_id", "name", "region", "postgres_version", "plan", "storage_gb",
    }


@pytest.mark.parametrize("field", ["colour", "deleted_at", "created_at", "Name"])
def test_unknown_cluster_field_is_422_naming_it(client, engine, field):
    body = internal_cluster_body(**{field: "x"})

    problem = assert_problem(client.post("/v1/clusters", json=body), 422, "validation_error")

    assert problem["errors"]["json"] == {field: ["Unknown field."]}
    assert db_row(engine, "clusters", body["id"]) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("storage_gb", 10), ("storage_gb", 4096), ("postgres_version", 14), ("postgres_version", 17),
     ("name", "a"), ("name", "a" * 63), ("name", "0-9-a-z"), ("generation", 2**31 - 1)],
)
def test_boundary_values_are_accepted(client, engine, field, value):
    body = internal_cluster_body(**{field: value})

    response = client.post("/v1/clusters", json=body)

    assert response.status_code == 201
    assert response.get_json()[field] == value
    assert db_row(engine, "clusters", body["id"])[field] == value


@pytest.mark.parametrize("region", ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1"])
def test_every_region_is_accepted(client, region):
    assert client.post("/v1/clusters", json=internal_cluster_body(region=region)).status_code == 201


@pytest.mark.parametrize("plan", ["hobby-0", "standard-2", "standard-4", "memory-8"])
def test_every_plan_is_accepted(client, plan):
    assert client.post("/v1/clusters", json=internal_cluster_body(plan=plan)).status_code == 201


# --- cluster update bodies ------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"generation": MISSING}, "generation"),
        ({"generation": 0}, "generation"),
        ({"generation": "3"}, "generation"),
        ({"generation": True}, "generation"),
        ({"name": MISSING}, "name"),
        ({"name": "UPPER"}, "name"),
        ({"name": "renamed\n"}, "name"),
        ({"plan": "huge"}, "plan"),
        ({"storage_gb": 4097}, "storage_gb"),
        ({"storage_gb": 20.5}, "storage_gb"),
        ({"region": "us-east-1"}, "region"),
        ({"team_id": SOME}, "team_id"),
        ({"id": SOME}, "id"),
    ],
)
def test_invalid_cluster_update_is_422_and_changes_nothing(client, engine, cluster, changes, field):
    body = {"generation": 2, "name": "renamed", "plan": "hobby-0", "storage_gb": 20}
    for key, value in changes.items():
        if value is MISSING:
            del body[key]
        else:
            body[key] = value
    before = db_row(engine, "clusters", cluster["id"])

    problem = assert_problem(client.put(f"/v1/clusters/{cluster['id']}", json=body), 422, "validation_error")

    assert list(problem["errors"]["json"]) == [field]
    assert db_row(engine, "clusters", cluster["id"]) == before


# --- firewall rule bodies -------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", "nope"),
        ("id", NIL),
        ("cidr", MISSING),
        ("cidr", "10.0.0.0/33"),
        ("cidr", "256.0.0.0/8"),
        ("cidr", "10.0.0/8/8"),
        ("cidr", "not-a-network"),
        ("cidr", ""),
        ("cidr", "2001:db8::/129"),
        ("cidr", "2001:db8:::/64"),
        ("cidr", "fe80::%eth0/64"),
        ("cidr", "10.0.0.0/8 "),
        ("cidr", 10),
        ("cidr", None),
        ("description", "nul \x00 inside"),
        ("description", "\ud800 lone surrogate"),
        ("description", "x" * 256),
        ("description", 5),
        ("generation", 0),
        ("cluster_id", SOME),
    ],
)
def test_invalid_rule_field_is_422_naming_it(client, engine, cluster, field, value):
    body = internal_rule_body()
    if value is MISSING:
        del body[field]
    else:
        body[field] = value

    # Sent as ASCII-escaped JSON so that even a lone surrogate travels intact.
    response = client.post(
        f"/v1/clusters/{cluster['id']}/firewall-rules", data=json.dumps(body), content_type="application/json"
    )

    problem = assert_problem(response, 422, "validation_error")
    assert list(problem["errors"]["json"]) == [field]
    if field != "id":
        assert db_row(engine, "firewall_rules", body["id"]) is None


def test_nul_in_description_says_so(client, cluster):
    response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=internal_rule_body(description="a\x00b"))

    problem = assert_problem(response, 422, "validation_error")
    assert "NUL" in problem["errors"]["json"]["description"][0]


def test_description_of_255_characters_is_accepted(client, cluster):
    response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=internal_rule_body(description="\u00e9" * 255))

    assert response.status_code == 201
    assert response.get_json()["description"] == "\u00e9" * 255


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"description": "x"}, "generation"),
        ({"generation": 2}, "description"),
        ({"generation": 2, "description": "a\x00"}, "description"),
        ({"generation": 2, "description": "\udfff"}, "description"),
        ({"generation": 2, "description": "x", "cidr": "10.0.0.0/8"}, "cidr"),
    ],
)
def test_invalid_rule_update_is_422_and_changes_nothing(client, engine, cluster, rule, body, field):
    before = db_row(engine, "firewall_rules", rule["id"])

    response = client.put(
        f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}",
        data=json.dumps(body),
        content_type="application/json",
    )

    problem = assert_problem(response, 422, "validation_error")
    assert list(problem["errors"]["json"]) == [field]
    assert db_row(engine, "firewall_rules", rule["id"]) == before


# --- query parameters -----------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=abc", "limit"),
        ("limit=" + "9" * 5000, "limit"),
        ("after=nope", "after"),
        (f"after={NIL}", "after"),
        ("team_id=nope", "team_id"),
        ("team_id=", "team_id"),
        ("limt=5", "limt"),  # unknown, like an unknown body field
    ],
)
def test_invalid_list_query_is_422_naming_it(client, query, field):
    problem = assert_problem(client.get(f"/v1/clusters?{query}"), 422, "validation_error")

    assert list(problem["errors"]["query"]) == [field]


def test_invalid_rule_list_query_is_422(client, cluster):
    response = client.get(f"/v1/clusters/{cluster['id']}/firewall-rules?limit=-1")

    problem = assert_problem(response, 422, "validation_error")
    assert list(problem["errors"]["query"]) == ["limit"]


# --- bodies that are not JSON objects -------------------------------------

BODY_ROUTES = [route for route in ROUTES if route[2] is not None]


def body_path(template):
    return template.format(id=SOME, rule_id=SOME)


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
@pytest.mark.parametrize(
    "raw",
    [b"{", b"{'id': 1}", b"not json", b'{"a": 1,}', b'{"name": "\xff\xfe"}'],
    ids=["truncated", "single-quotes", "text", "trailing-comma", "not-utf8"],
)
def test_body_that_is_not_json_is_400(client, route, raw):
    method, template, _ = route

    response = client.open(body_path(template), method=method, data=raw, content_type="application/json")

    problem = assert_problem(response, 400, "bad_request")
    assert "JSON" in problem["detail"]


@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000 + b"]" * 100_000, b'{"storage_gb": ' + b"1" * 5000 + b"}"],
    ids=["deeply-nested", "integer-of-5000-digits"],
)
def test_json_python_cannot_parse_is_a_4xx_not_a_5xx(client, raw):
    response = client.post("/v1/clusters", data=raw, content_type="application/json")

    assert 400 <= response.status_code < 500, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
@pytest.mark.parametrize("payload", [[], [1, 2], "a string", 42, None, True], ids=repr)
def test_body_that_is_not_an_object_is_422(client, route, payload):
    method, template, _ = route

    response = client.open(body_path(template), method=method, data=json.dumps(payload), content_type="application/json")

    problem = assert_problem(response, 422, "validation_error")
    assert problem["errors"]["json"]


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml", None])
def test_body_that_is_not_sent_as_json_is_415(client, engine, route, content_type):
    method, template, kind = route
    body = valid_body(kind)
    headers = {} if content_type is None else {"Content-Type": content_type}

    response = client.open(body_path(template), method=method, data=json.dumps(body), headers=headers)

    problem = assert_problem(response, 415, "unsupported_media_type")
    assert "application/json" in problem["detail"]
    if kind == "cluster":
        assert db_row(engine, "clusters", body["id"]) is None


def test_json_with_a_charset_or_a_json_suffix_is_accepted(client):
    first = internal_cluster_body()
    second = internal_cluster_body()

    ok = client.post("/v1/clusters", data=json.dumps(first), content_type="application/json; charset=utf-8")
    suffixed = client.post("/v1/clusters", data=json.dumps(second), content_type="application/vnd.cluster+json")

    assert (ok.status_code, suffixed.status_code) == (201, 201)


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
def test_body_over_1_mib_is_413(client, engine, route):
    method, template, kind = route
    body = {**valid_body(kind), "padding": "x" * (1024 * 1024)}

    response = client.open(body_path(template), method=method, json=body)

    problem = assert_problem(response, 413, "payload_too_large")
    assert "1 MiB" in problem["detail"]
    if kind == "cluster":
        assert db_row(engine, "clusters", body["id"]) is None


# --- routing --------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/", "/v1", "/v1/nothing", "/v2/clusters", f"/v1/clusters/{SOME}/nope", f"/v1/clusters/{SOME}/firewall-rules/{SOME}/x"],
)
def test_unknown_route_is_404_problem(client, path):
    assert_problem(client.get(path), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PATCH", f"/v1/clusters/{SOME}"),
        ("POST", f"/v1/clusters/{SOME}"),
        ("DELETE", "/v1/clusters"),
        ("PUT", "/v1/clusters"),
        ("PUT", f"/v1/clusters/{SOME}/firewall-rules"),
        ("POST", f"/v1/clusters/{SOME}/firewall-rules/{SOME}"),
        ("POST", "/healthz"),
    ],
)
def test_method_not_allowed_is_405_problem_with_allow(client, method, path):
    response = client.open(path, method=method)

    assert_problem(response, 405, "method_not_allowed")
    assert "GET" in response.headers["Allow"]
    assert method not in response.headers["Allow"].replace(" ", "").split(",")


# --- authentication -------------------------------------------------------

BAD_CREDENTIALS = [
    None,
    "Bearer wrong-token",
    f"Bearer {TOKEN}x",
    f"Bearer {TOKEN[:-1]}",
    f"Bearer {TOKEN.upper()}",
    "Bearer",
    "Bearer ",
    TOKEN,
    f"Basic {TOKEN}",
    "Basic dGVzdDp0ZXN0",
    f"Token {TOKEN}",
    f"Bearer\u00e9 {TOKEN}",
]


@pytest.mark.parametrize("route", [*ROUTES, ("GET", "/v1/nothing", None), ("PATCH", "/v1/clusters/{id}", None)], ids=route_id)
@pytest.mark.parametrize("authorization", BAD_CREDENTIALS, ids=repr)
def test_without_the_token_every_route_is_401(app, engine, route, authorization):
    method, template, kind = route
    body = valid_body(kind)
    headers = {} if authorization is None else {"Authorization": authorization}

    response = app.test_client().open(template.format(id=SOME, rule_id=SOME), method=method, json=body, headers=headers)

    assert_problem(response, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"] == "Bearer"
    if kind == "cluster":
        assert db_row(engine, "clusters", body["id"]) is None


def test_a_tombstone_cannot_be_planted_without_the_token(anon, engine):
    target = uuid.uuid4()

    assert_problem(anon.delete(f"/v1/clusters/{target}"), 401, "unauthorized")
    assert db_row(engine, "clusters", target) is None


def test_the_bearer_scheme_is_case_insensitive(app):
    response = app.test_client().get("/v1/clusters?limit=1", headers={"Authorization": f"bearer {TOKEN}"})

    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/openapi.json", "/docs"])
def test_health_and_docs_need_no_token(anon, path):
    assert anon.get(path).status_code == 200


def test_healthz_answers_ok(anon):
    response = anon.get("/healthz")

    assert response.get_json() == {"status": "ok"}


def test_openapi_documents_bearer_auth_and_problem_errors(anon):
    spec = anon.get("/openapi.json").get_json()

    assert spec["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert {"bearerAuth": []} in spec["security"]
    responses = spec["paths"]["/v1/clusters"]["post"]["responses"]
    for status in ("422", "default"):
        ref = responses[status]["$ref"].rsplit("/", 1)[-1]
        assert "application/problem+json" in spec["components"]["responses"][ref]["content"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v1/clusters/batch"),
        ("GET", "/v1/clusters/batch"),
        ("DELETE", f"/v1/clusters/{SOME}/firewall-rules/batch"),
    ],
)
def test_a_method_the_batch_route_does_not_take_is_405_not_an_invalid_uuid(client, method, path):
    response = client.open(path, method=method)

    assert_problem(response, 405, "method_not_allowed")  # was 422: "'batch' is not a valid UUID"
    assert "POST" in response.headers["Allow"].replace(" ", "").split(",")
