"""One Idempotency-Key per request, as gunicorn hands requests over.

gunicorn joins a header sent on two lines into "one,two" before Flask sees
it, exactly as one key that contains a comma would read. These requests are
written byte for byte on a raw socket to a live platform_svc, since an HTTP
client library might join the lines itself.
"""
from __future__ import annotations

import json
import socket

from tests.helpers import cluster_body


def raw_post(pair, path: str, body: dict, *key_lines: str) -> tuple[int, dict]:
    """POST ``body`` with one ``Idempotency-Key:`` line per entry of ``key_lines``; the status and JSON answer."""
    payload = json.dumps(body).encode()
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{pair.platform_svc.port}",
        f"Authorization: Bearer {pair.api_key}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"Idempotency-Key: {key}" for key in key_lines),
        "Connection: close",
    ]
    with socket.create_connection(("127.0.0.1", pair.platform_svc.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, body_bytes = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body_bytes)


def test_two_idempotency_key_lines_are_a_400_and_create_nothing(pair):
    status, problem = raw_post(pair, "/v1/clusters", cluster_body(), "one", "two")

    assert status == 400, problem
    assert problem["code"] == "invalid_idempotency_key"
    assert "more than once" in problem["detail"]
    assert pair.platform_rows("clusters") == {}


def test_the_same_key_on_two_lines_is_refused_too(pair):
    status, problem = raw_post(pair, "/v1/clusters", cluster_body(), "same", "same")

    assert (status, problem["code"]) == (400, "invalid_idempotency_key")
    assert pair.platform_rows("clusters") == {}


def test_one_key_that_contains_a_comma_is_a_key_like_any_other(pair):
    created, first = raw_post(pair, "/v1/clusters", cluster_body(), "one,two")
    replayed, again = raw_post(pair, "/v1/clusters", cluster_body(), "one,two")
    other_body, reused = raw_post(pair, "/v1/clusters", cluster_body(name="other"), "one,two")

    assert (created, replayed, other_body) == (201, 200, 422)
    assert again["id"] == first["id"]
    assert reused["code"] == "idempotency_key_reused"
    assert [row["idempotency_key"] for row in pair.platform_rows("clusters").values()] == ["one,two"]


def test_a_repeated_key_on_a_firewall_rule_is_refused_as_well(pair):
    cluster = pair.api("POST", "/v1/clusters", json=cluster_body()).json()

    status, problem = raw_post(pair, f"/v1/clusters/{cluster['id']}/firewall-rules", {"cidr": "10.0.0.0/8"}, "a", "b")

    assert (status, problem["code"]) == (400, "invalid_idempotency_key")
    assert pair.platform_rows("firewall_rules") == {}
