"""Credentials and fairness with real processes: the internal token rotated under traffic, API keys
added, listed and revoked with the console script and refused at once by every gunicorn worker,
and the per-account limit shared by the workers of two replicas."""
from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import requests
from idempotent_pair_client.platform import PlatformClient
from sqlalchemy import text

from platform_svc.api.admission import REFRESH_SECONDS
from tests.helpers import cluster_body
from tooling.pair import TOKEN
from tooling.testing import wait_for
from tooling.windows import database_second, in_one_database_second

NEW_TOKEN = "rotated-internal-token"
REFUSED = re.compile(r"access: \S+ \S+ 401 ")  # an access line of a request answered 401


# Connections held by each worker -----------------------------------------------------------


def worker_holding(server, client_port: int) -> int | None:
    """The worker of ``server`` whose socket is the far end of our connection from ``client_port``."""
    for pid in server.worker_pids():
        for connection in psutil.Process(pid).net_connections(kind="tcp"):
            if connection.laddr.port == server.port and connection.raddr and connection.raddr.port == client_port:
                return pid
    return None


@pytest.fixture
def opened():
    """Every connection the test opens (closed after it, whatever happened)."""
    connections: list[http.client.HTTPConnection] = []
    yield connections
    for connection in connections:
        connection.close()


def connect(opened: list, port: int) -> http.client.HTTPConnection:
    opened.append(http.client.HTTPConnection("127.0.0.1", port, timeout=30))
    return opened[-1]


def connections_to_every_worker(opened: list, *servers, timeout: float = 20) -> dict[int, http.client.HTTPConnection]:
    """Keep-alive connections, opened until every worker of ``servers`` holds one: {worker pid: connection}.
    (gunicorn's workers share the listening socket; which accepts a connection is up to them.)"""
    wanted = {pid for server in servers for pid in server.worker_pids()}
    held: dict[int, http.client.HTTPConnection] = {}
    spare: list[http.client.HTTPConnection] = []
    deadline = time.monotonic() + timeout
    while set(held) != wanted:
        assert time.monotonic() < deadline, f"workers {wanted - set(held)} took no connection"
        for server in servers:
            connection = connect(opened, server.port)
            connection.request("GET", "/healthz")
            connection.getresponse().read()
            pid = worker_holding(server, connection.sock.getsockname()[1])
            if pid is not None and pid not in held:
                held[pid] = connection
            else:
                spare.append(connection)  # kept open meanwhile, so the next one may land elsewhere
    for connection in spare:
        connection.close()
    return held


def get(connection: http.client.HTTPConnection, path: str, api_key: str) -> tuple[int, dict[str, str], bytes]:
    connection.request("GET", path, headers={"Authorization": f"Bearer {api_key}"})
    answer = connection.getresponse()
    return answer.status, dict(answer.getheaders()), answer.read()


def in_one_window(pair, attempt, *, tries: int = 10):
    """``attempt()`` started early in a database second, until one run stayed inside that second."""
    return in_one_database_second(pair.platform_engine, attempt, tries=tries)[0]


def past_the_refresh_period() -> None:
    """The bound of a change to the keys: past it, each worker's next request re-reads the keys it
    holds. Real time: the workers are processes of their own, on their own clocks."""
    time.sleep(REFRESH_SECONDS)


def cli_json(pair, *args: str):
    result = pair.cli(*args, "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# The internal token ---------------------------------------------------------------------------


class Traffic:
    """Public creates one after another on a thread until stopped; each answer by phase."""

    def __init__(self, pair) -> None:
        self.pair = pair
        self.phase = "start"
        self.answers: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            phase = self.phase
            try:
                response = self.pair.api("POST", "/v1/clusters", json=cluster_body(name=f"rotation-{n}"))
            except requests.RequestException:
                self.answers[phase, "no answer"] += 1  # platform_svc restarting: nothing was sent down
                self._stop.wait(0.05)
                continue
            outcome = response.json().get("sync_state", str(response.status_code)) if response.ok else str(response.status_code)
            self.answers[phase, outcome] += 1

    def synced_in(self, phase: str) -> int:
        return self.answers[phase, "synced"]

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def test_rotating_the_internal_token_as_documented_fails_no_push(new_pair):
    """docs/operations.md's rotation, under traffic: the new token second where it is checked, then
    first where it is presented, then the old one dropped everywhere; each step restarts the processes
    it names with their new settings while creates keep coming. No push is refused (no 401 from
    cluster_svc), none fails, every row ends synced, and the old token no longer opens cluster_svc."""
    pair = new_pair()
    old = TOKEN
    # (phase, cluster_svc's INTERNAL_TOKEN, platform_svc's, the reconciler's): None leaves it running as it is.
    steps = [
        ("new accepted", f"{old},{NEW_TOKEN}", f"{old},{NEW_TOKEN}", None),
        ("new presented", None, f"{NEW_TOKEN},{old}", f"{NEW_TOKEN},{old}"),
        ("old dropped", NEW_TOKEN, NEW_TOKEN, NEW_TOKEN),
    ]
    def restart_cluster_svc(tokens: str) -> None:
        pair.stop_cluster_svc()
        pair.restart_cluster_svc({"INTERNAL_TOKEN": tokens})

    def restart_platform_svc(tokens: str) -> None:
        pair.platform_svc.stop()
        pair.restart_platform_svc({"INTERNAL_TOKEN": tokens})

    def restart_reconciler(running, tokens: str):
        if running is not None:
            running.__exit__(None, None, None)
        running = pair.reconciler(env={"INTERNAL_TOKEN": tokens})
        running.__enter__()
        return running

    with Traffic(pair) as traffic:
        reconciler = restart_reconciler(None, old)
        wait_for(lambda: traffic.synced_in("start") >= 3, what="creates pushed before the rotation")
        try:
            for phase, cluster_tokens, platform_tokens, reconciler_tokens in steps:
                traffic.phase = phase
                # The processes a step names are restarted together; the steps one after the other.
                with ThreadPoolExecutor(3) as pool:
                    restarts = [pool.submit(restart_platform_svc, platform_tokens)]
                    if cluster_tokens:
                        restarts.append(pool.submit(restart_cluster_svc, cluster_tokens))
                    if reconciler_tokens:
                        restarts.append(pool.submit(restart_reconciler, reconciler, reconciler_tokens))
                    results = [restarted.result() for restarted in restarts]
                if reconciler_tokens:
                    reconciler = results[-1]
                if phase == "new accepted":  # cluster_svc, and /metrics on both, take either token now
                    for token in (old, NEW_TOKEN):
                        for server in (pair.cluster_svc, pair.platform_svc):
                            headers = {"Authorization": f"Bearer {token}"}
                            assert requests.get(f"{server.url}/metrics", headers=headers, timeout=10).ok
                # Pushed inline with the token this step presents (and by the reconciler: the rows left pending).
                wait_for(lambda phase=phase: traffic.synced_in(phase) >= 3, what=f"creates pushed inline after '{phase}'")
        finally:
            traffic.__exit__(None, None, None)
            wait_for(pair.all_synced, timeout=30, what="every row synced after the rotation")
            reconciler.__exit__(None, None, None)

    # Every push that did not succeed is logged "push of <resource> <id>: <outcome> (<reason>)",
    # inline by platform_svc and by the reconciler.
    pushers = "\n".join(path.read_text() for path in [pair.workdir / "platform_svc.log",
                                                       *pair.workdir.glob("reconciler-*.log")])
    outcomes = Counter(re.findall(r"push of \S+ \S+: (\w+) \(", pushers))
    print(f"rotation: public answers {dict(traffic.answers)}; pushes not done {dict(outcomes)}")
    assert not REFUSED.findall((pair.workdir / "cluster_svc.log").read_text())
    assert ": 401 unauthorized" not in pushers  # (a refused push's reason: "POST /v1/clusters/batch: 401 unauthorized: ...")
    assert outcomes["permanent"] == 0
    with pair.platform_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM clusters WHERE sync_state = 'failed'")).scalar() == 0
    assert all(traffic.synced_in(phase) >= 3 for phase, *_ in steps)
    pair.assert_downstream_matches()
    # (After reading the log: these 401s are the test's own.) The old token is refused now, as is anything
    # but one whole token of the list.
    assert requests.get(f"{pair.cluster_svc.url}/v1/clusters", headers={"Authorization": f"Bearer {NEW_TOKEN}"}).ok
    for wrong in (old, f"{NEW_TOKEN},{old}", NEW_TOKEN[:-1], NEW_TOKEN + " x"):
        headers = {"Authorization": f"Bearer {wrong}"}
        assert requests.get(f"{pair.cluster_svc.url}/v1/clusters", headers=headers, timeout=10).status_code == 401


# API keys ------------------------------------------------------------------------------------


def test_keys_added_listed_and_revoked_with_the_cli_and_a_revoked_key_is_refused_by_every_worker_within_the_period(
    pair, opened
):
    account_id, first_key = pair.account_id, pair.api_key  # (create-account's own tests are in tests/platform_svc)
    second = cli_json(pair, "create-key", account_id)
    assert second["account_id"] == account_id and second["api_key"].startswith(second["key_id"] + ".")
    second_key = second["api_key"]

    # Each worker has served both keys (a worker that kept what it found would answer from that).
    connections = connections_to_every_worker(opened, pair.platform_svc)
    assert len(connections) == 2
    for connection in connections.values():
        assert get(connection, "/v1/clusters", first_key)[0] == get(connection, "/v1/clusters", second_key)[0] == 200

    listed = pair.cli("list-keys", account_id, "--json")
    keys = json.loads(listed.stdout)
    assert [key["key_id"] for key in keys] == [first_key.partition(".")[0], second["key_id"]]
    assert all(key["last_used_at"] and key["created_at"] and key["revoked_at"] is None for key in keys)
    for key in (first_key, second_key):
        assert key.partition(".")[2] not in listed.stdout

    revoked = pair.cli("revoke-key", second["key_id"])
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked {second['key_id']} of account {account_id}" in revoked.stdout
    past_the_refresh_period()

    # In each of the same workers (on new connections: a loaded machine may take the commands
    # longer than the keep-alive time of the first ones).
    again = connections_to_every_worker(opened, pair.platform_svc)
    assert set(again) == set(connections)
    for pid, connection in again.items():
        status, headers, body = get(connection, "/v1/clusters", second_key)
        assert (status, json.loads(body)["code"], headers["WWW-Authenticate"]) == (401, "unauthorized", "Bearer"), pid
        assert get(connection, "/v1/clusters", first_key)[0] == 200, pid
    after = {key["key_id"]: key for key in json.loads(pair.cli("list-keys", account_id, "--json").stdout)}
    assert after[second["key_id"]]["revoked_at"] and after[first_key.partition(".")[0]]["revoked_at"] is None


def test_an_account_removed_by_hand_is_refused_by_every_worker_never_500(pair, opened):
    account = {"account_id": pair.account_id, "api_key": pair.api_key}
    connections = connections_to_every_worker(opened, pair.platform_svc)
    for connection in connections.values():
        assert get(connection, "/v1/clusters", account["api_key"])[0] == 200

    with pair.platform_engine.begin() as conn:
        conn.execute(text("DELETE FROM accounts WHERE id = :id"), {"id": account["account_id"]})
    past_the_refresh_period()

    for connection in connections.values():
        assert get(connection, "/v1/clusters", account["api_key"])[0] == 401
        connection.request("POST", "/v1/clusters", body=json.dumps(cluster_body()),
                           headers={"Authorization": f"Bearer {account['api_key']}", "Content-Type": "application/json"})
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())["code"]) == (401, "unauthorized")


# The rate limit --------------------------------------------------------------------------------


def test_the_limit_holds_across_the_workers_of_two_replicas(pair, opened):
    account = {"account_id": pair.account_id, "api_key": pair.api_key}
    set_limit = pair.cli("set-rate-limit", account["account_id"], "5")
    assert set_limit.returncode == 0, set_limit.stderr
    past_the_refresh_period()
    replica = pair.platform_replica()
    try:
        pinned = list(connections_to_every_worker(opened, pair.platform_svc, replica).values())
        assert len(pinned) == 4
        more = [connect(opened, server.port) for server in (pair.platform_svc, replica) for _ in range(6)]
        connections = pinned + more  # 16 requests at once, every worker of both replicas among them

        def one(connection):
            status, headers, _ = get(connection, "/v1/clusters", account["api_key"])
            return status, headers, database_second(pair.platform_engine)[0]

        def at_once():
            with ThreadPoolExecutor(len(connections)) as pool:
                return list(pool.map(one, connections))

        def counted_in(answers, second) -> bool:  # every one let in was counted in that second
            return all(counted == second for status, _, counted in answers if status == 200)

        answers, _ = in_one_database_second(pair.platform_engine, at_once, stayed=counted_in)
        let_in = [(headers, second) for status, headers, second in answers if status == 200]
    finally:
        replica.stop()

    statuses = Counter(status for status, _, _ in answers)
    assert statuses == {200: 5, 429: 11}, statuses  # 16 requests in one second, 5 let in, wherever they landed
    assert sorted(headers["RateLimit-Remaining"] for headers, _ in let_in) == ["0", "1", "2", "3", "4"]


def test_the_client_waits_out_a_429_as_retry_after_asks(pair):
    with pair.platform_engine.begin() as conn:
        conn.execute(text("UPDATE accounts SET rate_limit = 1 WHERE id = :id"), {"id": pair.account_id})
    account = {"api_key": pair.api_key}

    started = time.monotonic()
    with PlatformClient(pair.platform_svc.url, api_key=account["api_key"], retry_for=20) as client:
        made = [client.create("/v1/clusters", cluster_body(name=f"paced-{n}")) for n in range(3)]
    elapsed = time.monotonic() - started

    assert len({c["id"] for c in made}) == 3
    assert elapsed >= 1.0  # three creates at one a second: the client waited for the next windows
    assert elapsed < 10
