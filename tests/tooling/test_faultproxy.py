"""The fault proxy (tooling.faultproxy) against a real HTTP server on loopback.

Each test starts a small threaded HTTP/1.1 server that records every request it
receives and answers with a JSON echo, and puts the proxy in front of it.
Nothing is mocked; waits are on events, with generous deadlines.
"""
from __future__ import annotations

import http.client
import http.server
import json
import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tooling.faultproxy import Fault, FaultProxy, Plan


class Upstream(http.server.ThreadingHTTPServer):
    """Records each request; answers 201 to a POST, 204 to a DELETE, else 200, with a JSON echo."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.seen: list[dict] = []
        self.arrived = threading.Condition()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, request: dict) -> None:
        with self.arrived:
            self.seen.append(request)
            self.arrived.notify_all()

    def wait_for(self, count: int, timeout: float = 10) -> list[dict]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.seen) >= count, timeout), self.seen
            return list(self.seen)


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen = {"method": self.command, "target": self.path, "headers": dict(self.headers), "body": body}
        self.server.record(seen)
        status = {"POST": 201, "DELETE": 204}.get(self.command, 200)
        self.send_response(status)
        if status == 204:
            self.end_headers()
            return
        payload = json.dumps({"method": self.command, "target": self.path, "body": body.decode()}).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def upstream():
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture
def proxy(upstream):
    with FaultProxy(upstream.url, delay=0.5) as proxy:
        yield proxy


def raw_exchange(url: str, data: bytes) -> bytes:
    """Send raw bytes to the proxy; return what came back until EOF.

    :raise ConnectionResetError: the proxy aborted the connection.
    """
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


POST = b"POST /v1/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def test_pass_forwards_the_request_and_returns_the_answer(proxy, upstream):
    response = requests.post(
        f"{proxy.url}/v1/things?team=7", json={"id": "a"}, headers={"Authorization": "Bearer t"}, timeout=10
    )

    assert response.status_code == 201
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {"method": "POST", "target": "/v1/things?team=7", "body": '{"id": "a"}'}
    [seen] = upstream.seen
    assert seen["headers"]["Authorization"] == "Bearer t"
    [exchange] = proxy.log
    assert (exchange.method, exchange.path, exchange.object_id) == ("POST", "/v1/things", "a")
    assert exchange.fault is Fault.PASS and exchange.status == 201 and exchange.delivered


def test_pass_keeps_the_client_connection_alive(proxy, upstream):
    parts = urlsplit(proxy.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        statuses = []
        for method in ("GET", "DELETE", "PUT"):
            connection.request(method, "/v1/things/1", body=b"{}" if method == "PUT" else None)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
    finally:
        connection.close()

    assert statuses == [200, 204, 200]
    assert [seen["method"] for seen in upstream.seen] == ["GET", "DELETE", "PUT"]


def test_a_chunked_request_body_is_forwarded_whole(proxy, upstream):
    response = requests.post(f"{proxy.url}/v1/things", data=iter([b'{"id":', b' "c"}']), timeout=10)

    assert response.status_code == 201
    assert upstream.seen[0]["body"] == b'{"id": "c"}'
    assert proxy.log[0].object_id == "c"


def test_refuse_closes_the_connection_without_forwarding(proxy, upstream):
    proxy.add_rule(Fault.REFUSE)

    assert raw_exchange(proxy.url, POST) == b""  # a clean end of stream, no answer
    assert upstream.seen == []
    assert proxy.log[0].fault is Fault.REFUSE and not proxy.log[0].forwarded


def test_reset_aborts_the_connection_without_forwarding(proxy, upstream):
    proxy.add_rule(Fault.RESET)

    with pytest.raises(ConnectionResetError):
        raw_exchange(proxy.url, POST)
    assert upstream.seen == []


@pytest.mark.parametrize("fault", [Fault.REFUSE, Fault.RESET])
def test_a_client_sees_a_refused_or_reset_request_as_a_connection_error(proxy, upstream, fault):
    proxy.add_rule(fault)

    with pytest.raises(requests.ConnectionError):
        requests.post(f"{proxy.url}/v1/things", json={"id": "r"}, timeout=10)
    assert upstream.seen == []
    assert requests.post(f"{proxy.url}/v1/things", json={"id": "r"}, timeout=10).status_code == 201  # rule used up


def test_drop_response_lets_the_upstream_answer_then_aborts(proxy, upstream):
    proxy.add_rule(Fault.DROP_RESPONSE)

    with pytest.raises(requests.ConnectionError):
        requests.post(f"{proxy.url}/v1/things", json={"id": "d"}, timeout=10)

    assert [seen["body"] for seen in upstream.seen] == [b'{"id": "d"}']
    [exchange] = proxy.log
    assert exchange.status == 201 and not exchange.delivered


def test_delay_outlasts_the_client_then_forwards(proxy, upstream):
    proxy.add_rule(Fault.DELAY)
    sent = time.monotonic()

    with pytest.raises(requests.Timeout):
        requests.post(f"{proxy.url}/v1/things", json={"id": "late"}, timeout=(1, 0.1))
    assert upstream.seen == []  # the client gave up before the request went on

    upstream.wait_for(1)
    proxy.wait_idle(timeout=10)
    assert time.monotonic() - sent >= 0.5
    [exchange] = proxy.log
    assert exchange.status == 201 and not exchange.delivered


def test_a_held_request_is_released_after_a_later_one(proxy, upstream):
    hold = proxy.hold(method="POST", object_id="first")
    first = {}
    sender = threading.Thread(
        target=lambda: first.update(
            response=requests.post(f"{proxy.url}/v1/things", json={"id": "first"}, timeout=30)
        )
    )
    sender.start()
    assert hold.wait_held(timeout=10).object_id == "first"

    second = requests.post(f"{proxy.url}/v1/things", json={"id": "second"}, timeout=10)
    assert second.status_code == 201
    assert [seen["body"] for seen in upstream.seen] == [b'{"id": "second"}']

    hold.release()
    [exchange] = hold.wait_done(timeout=10)
    sender.join(timeout=10)
    assert [seen["body"] for seen in upstream.seen] == [b'{"id": "second"}', b'{"id": "first"}']
    assert exchange.status == 201 and exchange.delivered
    assert first["response"].status_code == 201


def test_a_hold_keeps_the_clients_retries_and_a_drop_forwards_none(proxy, upstream):
    hold = proxy.hold(method="PUT")
    with requests.Session() as session:
        # Two quick retries after read timeouts, as the services' own client does.
        session.mount("http://", HTTPAdapter(max_retries=Retry(total=2, read=2, allowed_methods=None)))
        with pytest.raises(requests.ConnectionError):
            session.put(f"{proxy.url}/v1/things/1", json={"generation": 2}, timeout=(1, 0.2))
        hold.wait_held(timeout=10, count=3)  # the first and both retries, all held
        newer = session.put(f"{proxy.url}/v1/things/1", json={"generation": 3}, timeout=10)

    assert newer.status_code == 200  # another body is another request: it passes
    hold.drop()
    exchanges = hold.wait_done(timeout=10)
    assert [e.forwarded for e in exchanges] == [False, False, False]
    assert [seen["body"] for seen in upstream.seen] == [b'{"generation": 3}']
    proxy.wait_idle(timeout=10)


def test_released_retries_go_upstream_in_arrival_order(proxy, upstream):
    hold = proxy.hold(method="POST")
    with requests.Session() as session:
        session.mount("http://", HTTPAdapter(max_retries=Retry(total=1, read=1, allowed_methods=None)))
        with pytest.raises(requests.ConnectionError):
            session.post(f"{proxy.url}/v1/things", json={"id": "x"}, timeout=(1, 0.2))
    hold.wait_held(timeout=10, count=2)

    hold.release()
    exchanges = hold.wait_done(timeout=10)

    assert [e.seq for e in exchanges] == sorted(e.seq for e in exchanges)
    assert [e.status for e in exchanges] == [201, 201]
    assert len(upstream.wait_for(2)) == 2


def test_rules_come_before_the_plan_and_run_out(upstream):
    with FaultProxy(upstream.url, plan=Plan(1, {Fault.RESET: 1.0})) as proxy:
        proxy.add_rule(Fault.PASS, method="GET", times=2)
        statuses = [requests.get(f"{proxy.url}/v1/things", timeout=10).status_code for _ in range(2)]
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{proxy.url}/v1/things", timeout=10)

    assert statuses == [200, 200]
    assert [e.fault for e in proxy.log] == [Fault.PASS, Fault.PASS, Fault.RESET]


RATES = {Fault.DROP_RESPONSE: 0.2, Fault.RESET: 0.1}


def draws(seed, count=5000):
    plan = Plan(seed, RATES)
    return [plan.draw() for _ in range(count)]


def test_a_plan_replays_from_its_seed():
    assert draws(42) == draws(42)
    assert draws(42) != draws(43)


@pytest.mark.parametrize("seed", range(50))
def test_a_plan_opens_with_each_of_its_faults_whatever_the_seed(seed):
    """A scenario asserting that a fault happened may rely on the plan, not on its seed."""
    assert draws(seed, count=2) == [Fault.DROP_RESPONSE, Fault.RESET]
    assert Plan(seed, {Fault.RESET: 0.0, Fault.DROP_RESPONSE: 0.5}).draw() is Fault.DROP_RESPONSE


def test_a_plan_draws_its_rates():
    counts = Counter(draws(42))

    assert 0.17 < counts[Fault.DROP_RESPONSE] / 5000 < 0.23
    assert 0.08 < counts[Fault.RESET] / 5000 < 0.12


@pytest.mark.parametrize("rates", [{Fault.RESET: 0.7, Fault.DROP_RESPONSE: 0.4}, {Fault.HOLD: 0.1}], ids=str)
def test_a_plan_refuses_impossible_rates(rates):
    with pytest.raises(ValueError):
        Plan(1, rates)


def test_the_proxy_applies_the_plans_draws_in_arrival_order(upstream):
    rates = {Fault.DROP_RESPONSE: 0.3, Fault.RESET: 0.2}
    plan = Plan(7, rates)
    expected = [plan.draw() for _ in range(40)]

    with FaultProxy(upstream.url, plan=Plan(7, rates)) as proxy:
        for index in range(40):
            try:
                requests.put(f"{proxy.url}/v1/things/{index}", json={}, timeout=10)
            except requests.ConnectionError:
                pass

    assert [e.fault for e in proxy.log] == expected
    assert proxy.faults() == Counter(f.value for f in expected if f is not Fault.PASS)


def test_an_unreachable_upstream_aborts_the_client():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens once it is closed
    with FaultProxy(f"http://127.0.0.1:{port}") as proxy:
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{proxy.url}/v1/things", timeout=10)

    [exchange] = proxy.log
    assert exchange.fault is Fault.PASS and "ConnectionRefused" in exchange.error


def test_stop_drops_what_is_held_and_returns(upstream):
    proxy = FaultProxy(upstream.url).start()
    hold = proxy.hold()
    errors = []

    def send():
        try:
            requests.get(f"{proxy.url}/v1/things", timeout=30)
        except requests.ConnectionError as exc:
            errors.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    hold.wait_held(timeout=10)
    proxy.stop()
    sender.join(timeout=10)

    assert not sender.is_alive() and len(errors) == 1
    assert upstream.seen == []
