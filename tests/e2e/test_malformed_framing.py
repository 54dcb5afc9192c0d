"""Every malformed request gets a 4xx, and no log line holds a body (design property 10).

Each request is written byte for byte on a raw socket (an HTTP client library would fix its
framing), to both services as they run and to the console's login form, with a marker in its
body; then every process log of the pair is searched for the marker.
"""
from __future__ import annotations

import json
import socket
import uuid

import pytest

from tests.helpers import with_account
from tooling.pair import TOKEN

# Chunked bodies whose framing is wrong: the size line or the data's terminator. MARKER stands
# for the body's content (a password, a create body): none of it may reach a log.
MARKER = "m4rker-of-the-body"
FRAMINGS = {
    "size not hex": b"zz\r\nMARKER\r\n0\r\n\r\n",
    "negative size": b"-1\r\nMARKER\r\n0\r\n\r\n",
    "0x prefix": b"0x10\r\nMARKERMARKER\r\n0\r\n\r\n",
    "leading space": b" 4\r\nMARKER\r\n0\r\n\r\n",
    "LF-only size line": b"4c\noperator=op&secret=MARKER&csrf_token=x\r\n0\r\n\r\n",
    "data without its CRLF": b"4\r\nMARKMARKER0\r\n\r\n",
}


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``, read the answer until the server closes: status, headers, body."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def request(path: str, *, authorization: str | None, extra: str = "", body: bytes = b"") -> bytes:
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}{extra}"
        "Connection: close\r\n\r\n"
    ).encode() + body


@pytest.fixture(scope="module")
def targets(module_pair, request):
    """(port, path, Authorization) of each entry a body can be sent to: both services' creates
    (with credentials that let the body be read) and the console's login form."""
    api = with_account(module_pair, request)
    return {
        "cluster_svc": (module_pair.cluster_svc.port, "/v1/clusters", f"Bearer {TOKEN}"),
        "platform_svc": (module_pair.platform_svc.port, "/v1/clusters", f"Bearer {api.current.api_key}"),
        "console login": (module_pair.platform_svc.port, "/console/login", None),
    }


@pytest.mark.parametrize("entry", ["cluster_svc", "platform_svc", "console login"])
@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_malformed_chunked_framing_is_a_400_and_never_logged(module_pair, targets, entry, framing):
    port, path, authorization = targets[entry]
    body = FRAMINGS[framing].replace(b"MARKER", MARKER.encode())

    status, headers, answer = exchange(
        port, request(path, authorization=authorization, extra="Transfer-Encoding: chunked\r\n", body=body)
    )

    assert status == 400, answer
    if entry == "console login":  # a person's form: its errors are pages
        assert headers["content-type"].startswith("text/html")
    else:
        assert headers["content-type"] == "application/problem+json"
        assert json.loads(answer)["code"] == "bad_request"
    assert MARKER not in module_pair.logs(lines=100_000)
    assert "Traceback" not in module_pair.logs(lines=100_000)


@pytest.mark.parametrize("entry", ["cluster_svc", "platform_svc"])
@pytest.mark.parametrize("codings", ["gzip, chunked", "deflate,chunked", "chunked, chunked", "identity"])
def test_a_transfer_coding_the_services_do_not_implement_is_refused_and_nothing_is_stored(
    module_pair, targets, entry, codings
):
    port, path, authorization = targets[entry]
    object_id = str(uuid.uuid4())
    payload = json.dumps({"id": object_id, "team_id": str(uuid.uuid4()), "name": "coded", "region": "eu-west-1",
                          "postgres_version": 16, "plan": "hobby-0", "storage_gb": 10}).encode()
    chunked = f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n"

    status, _, answer = exchange(
        port, request(path, authorization=authorization, extra=f"Transfer-Encoding: {codings}\r\n", body=chunked)
    )

    assert status == 400, answer
    assert json.loads(answer)["code"] == "bad_request"
    assert module_pair.cluster_row("clusters", object_id) is None


@pytest.mark.parametrize("entry", ["cluster_svc", "platform_svc"])
def test_an_x_request_id_sent_twice_is_replaced_like_any_invalid_one(module_pair, targets, entry):
    port, _, _ = targets[entry]

    status, headers, _ = exchange(
        port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: one\r\nX-Request-ID: two\r\n"
        b"Connection: close\r\n\r\n",
    )

    assert status == 200
    assert headers["x-request-id"] not in ("one", "two", "one,two") and len(headers["x-request-id"]) == 32
