"""The edge answers only what it has read whole and understood, on both services as they run.

A body shorter than its Content-Length (the client half-closed) is refused
with nothing stored; a body in a Content-Encoding the services do not read
gets 415; a query parameter is read as strictly as a header (once, in UTF-8,
in ASCII digits where it is a number); an X-Request-ID that could forge a
field of a log line is replaced; /docs serves only what its page loads.
Requests with a broken framing are written byte for byte on raw sockets,
since an HTTP client library would fix them.
"""
from __future__ import annotations

import json
import socket
import uuid

import pytest
import requests

from tests.helpers import cluster_body
from tooling.pair import TOKEN
from tooling.testing import wait_for


def half_closed_post(port: int, path: str, token: str, body: dict, *, missing: int) -> tuple[int, dict]:
    """POST a body ``missing`` bytes shorter than its Content-Length, then half-close: the status and answer."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload) + missing}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + payload)
        sock.shutdown(socket.SHUT_WR)  # nothing more is coming
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def internal_body() -> dict:
    return {**cluster_body(), "id": str(uuid.uuid4()), "team_id": str(uuid.uuid4())}


def test_a_body_shorter_than_its_content_length_is_refused_and_stores_nothing(pair):
    public = half_closed_post(pair.platform_svc.port, "/v1/clusters", pair.api_key, cluster_body(), missing=40)
    body = internal_body()
    internal = half_closed_post(pair.cluster_svc.port, "/v1/clusters", TOKEN, body, missing=1)

    for status, problem in (public, internal):
        assert (status, problem["code"]) == (400, "incomplete_body"), problem
        assert "nothing was done" in problem["detail"]
    assert pair.platform_rows("clusters") == {}
    assert pair.cluster_row("clusters", body["id"]) is None


def test_the_same_request_sent_whole_is_created(pair):
    """The control: what the test above cuts short is a valid request."""
    public = half_closed_post(pair.platform_svc.port, "/v1/clusters", pair.api_key, cluster_body(), missing=0)
    internal = half_closed_post(pair.cluster_svc.port, "/v1/clusters", TOKEN, internal_body(), missing=0)

    assert (public[0], internal[0]) == (201, 201)


@pytest.mark.parametrize("encoding", ["gzip", "br", "x-unknown"])
def test_a_body_in_an_encoding_the_service_does_not_read_is_a_415(pair, encoding):
    body = internal_body()
    public = pair.api("POST", "/v1/clusters", data=json.dumps(cluster_body()),
                      headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    internal = requests.post(f"{pair.cluster_svc.url}/v1/clusters", data=json.dumps(body), timeout=30,
                             headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                                      "Content-Encoding": encoding})

    for answer in (public, internal):
        assert answer.status_code == 415, answer.text
        assert answer.json()["code"] == "unsupported_content_encoding"
    assert pair.platform_rows("clusters") == {}
    assert pair.cluster_row("clusters", body["id"]) is None


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=2&limit=abc", "limit"), ("limit=2&limit=2", "limit"), ("limit=%EF%BC%91", "limit"),
     ("idempotency_key=%ff", "_query")],
    ids=["repeated", "repeated-same", "fullwidth-digit", "not-utf8"],
)
def test_a_query_parameter_is_read_as_strictly_as_a_header(pair, query, field):
    answer = pair.api("GET", f"/v1/clusters?{query}")

    assert answer.status_code == 422, answer.text
    assert field in answer.json()["errors"]["query"]


def test_the_internal_listing_reads_its_query_as_strictly(pair):
    answer = requests.get(f"{pair.cluster_svc.url}/v1/clusters?limit=1&limit=2", timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}"})

    assert answer.status_code == 422 and "limit" in answer.json()["errors"]["query"]


@pytest.mark.parametrize("sent", ["x request_id=deadbeef status=200", 'quote"d', "back\\slash"])
def test_a_request_id_that_could_forge_a_log_field_is_replaced(pair, sent):
    answer = pair.api("GET", "/v1/clusters", headers={"X-Request-ID": sent})

    assert answer.status_code == 200
    assert answer.headers["X-Request-ID"] != sent
    wait_for(lambda: answer.headers["X-Request-ID"] in pair.logs(lines=500), what="the request's log line")
    assert sent not in pair.logs(lines=500)


def test_docs_serve_only_the_files_their_page_loads(pair):
    for service in (pair.platform_svc, pair.cluster_svc):
        assert requests.get(f"{service.url}/docs/swagger-ui/swagger-ui-bundle.js", timeout=30).status_code == 200
        for stock in ("swagger-initializer.js", "index.html"):  # the bundle's own: they point at another host
            assert requests.get(f"{service.url}/docs/swagger-ui/{stock}", timeout=30).status_code == 404
