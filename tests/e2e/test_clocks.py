"""Skewed clocks on real processes: skew is a transient fault, never a permanent one.

One pair for the module whose two services each read their time through
libfaketime (tooling.fakeclock), with an offset the test moves while they run:
platform_svc ten minutes ahead and forty days behind, cluster_svc ten minutes
behind (the three faults of issue 25) and forty days ahead, one at a time and
then jumping while creates are in flight. Each service measures its clock
every half second here (``CLOCK_CHECK_SECONDS``: libfaketime moves the
monotonic clock too, so the step detection of a real clock cannot see its
steps). A reconciler runs beside the pair throughout, as in production, with
a one-second backoff cap. The databases' clocks are the real one.

What a user would notice, checked each time: no create is refused with a 4xx
for a server's clock, none is acknowledged and then lost or failed, every row
ends synced once the clocks are right, and no ID past the horizon is ever
created (what a purge relies on).
"""
from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from types import SimpleNamespace

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import cluster_body, with_account
from tooling.fakeclock import FakeClock
from tooling.pair import TOKEN, start_pair
from tooling.testing import uuid7_ago, wait_for

MINUTES_10 = 600
DAYS_40 = 40 * 86400


@pytest.fixture(scope="module")
def clocked(pg_server_url, tmp_path_factory):
    """The module's pair, each service under a fake clock of its own, with a reconciler running."""
    workdir = tmp_path_factory.mktemp("clocks")
    clocks = SimpleNamespace(
        platform=FakeClock(workdir / "platform_svc.faketime"), cluster=FakeClock(workdir / "cluster_svc.faketime")
    )
    pair = start_pair(
        pg_server_url, workdir, env={"CLOCK_CHECK_SECONDS": "0.5"},
        service_env={"platform_svc": clocks.platform.env, "cluster_svc": clocks.cluster.env},
    )
    try:
        with pair.reconciler("--max-backoff", "1"):
            yield pair, clocks
    finally:
        pair.stop()


@pytest.fixture
def pair(clocked, request):
    pair, _ = clocked
    return with_account(pair, request)


@pytest.fixture
def clocks(clocked):
    """The two services' clocks, set right again after the test."""
    _, clocks = clocked
    yield clocks
    clocks.platform.set(0)
    clocks.cluster.set(0)


def offset(service, reference: str) -> float | None:
    """A service's ``clock_offset_seconds{reference}`` (its scrape measures the database's anew)."""
    scrape = requests.get(f"{service.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    for family in text_string_to_metric_families(scrape.text):
        for sample in family.samples:
            if sample.name == "clock_offset_seconds" and sample.labels == {"reference": reference}:
                return sample.value
    return None


def public(pair, method: str, path: str, **kwargs):
    """A call to platform_svc on a connection of its own. Under libfaketime a step moves the
    monotonic clock too (a real step does not), and a kept-alive connection's read deadline,
    on that clock, can pass at once: the service would drop it before reading the request."""
    headers = {**pair.current.headers, **kwargs.pop("headers", {})}
    return requests.request(method, pair.platform_svc.url + path, headers=headers, timeout=30, **kwargs)


def named_offsets(text: str) -> list[float]:
    """The offsets a problem's detail or a log names ("600.0 s ahead of its database's")."""
    return [float(seconds) for seconds in re.findall(r"([0-9.]+) s (?:ahead of|behind) its database's", text)]


def assert_clock_skew(response, offset_seconds: int) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert int(response.headers["Retry-After"]) > 0
    problem = response.json()
    assert problem["code"] == "clock_skew"
    assert named_offsets(problem["detail"]) == [pytest.approx(abs(offset_seconds), abs=5)], problem["detail"]


def all_synced_within(pair, seconds: float = 30) -> None:
    wait_for(pair.all_synced, timeout=seconds, what="every row synced")
    pair.assert_downstream_matches()


@pytest.mark.parametrize("skew", [MINUTES_10, -DAYS_40], ids=["10-minutes-ahead", "40-days-behind"])
def test_platform_svc_with_a_skewed_clock_refuses_creates_503_and_stores_nothing_until_it_is_right(
    pair, clocks, skew
):
    kept = pair.current.create("/v1/clusters", cluster_body(name="before"))
    clocks.platform.set(skew)

    refused = public(pair, "POST", "/v1/clusters", json=cluster_body(name="during"))

    assert_clock_skew(refused, skew)
    assert {row["name"] for row in pair.platform_rows("clusters").values()} == {"before"}  # nothing stored
    assert public(pair, "GET", f"/v1/clusters/{kept['id']}").status_code == 200  # reads go on
    assert offset(pair.platform_svc, "database") == pytest.approx(-skew, abs=5)  # the database minus this host
    logged = named_offsets((pair.workdir / "platform_svc.log").read_text())  # a log line names it
    assert pytest.approx(abs(skew), abs=5) in logged

    clocks.platform.set(0)
    created = public(pair, "POST", "/v1/clusters", json=cluster_body(name="after"))  # the first after the step
    assert created.status_code == 201 and created.json()["sync_state"] in ("pending", "synced")
    assert abs(offset(pair.platform_svc, "database")) < 1
    all_synced_within(pair)


def test_cluster_svc_ten_minutes_behind_keeps_the_row_pending_then_synced_never_failed(pair, clocks):
    clocks.cluster.set(-MINUTES_10)
    created = public(pair, "POST", "/v1/clusters", json=cluster_body(name="skewed-downstream"))
    assert created.status_code == 201 and created.json()["sync_state"] != "failed"
    cluster_id = created.json()["id"]

    def retried_as_skew():
        row = pair.platform_rows("clusters")[cluster_id]
        assert row["sync_state"] == "pending", row  # never failed: skew is transient
        return row["attempts"] >= 2 and "clock_skew" in (row["sync_error"] or "") and row

    wait_for(retried_as_skew, timeout=20, what="pushes refused for the clock, and retried")
    direct = pair.internal("POST", "/v1/clusters", json={**cluster_body(), "id": str(uuid7_ago(0)),
                                                         "team_id": str(uuid.uuid4())})
    assert_clock_skew(direct, MINUTES_10)  # cluster_svc refuses to judge IDs: no 422

    clocks.cluster.set(0)
    all_synced_within(pair)
    assert pair.platform_rows("clusters")[cluster_id]["sync_state"] == "synced"


def test_cluster_svc_behind_creates_no_id_a_purge_may_have_passed(pair, clocks):
    """A purge has removed (or may remove) every tombstone of an ID older than the horizon and its grace:
    creating such an ID again would bring it back. cluster_svc two days behind sees a 31-day-old ID as fresh."""
    expired = {**cluster_body(), "id": str(uuid7_ago(31 * 86400)), "team_id": str(uuid.uuid4())}
    clocks.cluster.set(-2 * 86400)

    refused = pair.internal("POST", "/v1/clusters", json=expired)  # the first write after the step is judged

    assert_clock_skew(refused, 2 * 86400)
    assert pair.cluster_row("clusters", expired["id"]) is None
    clocks.cluster.set(0)
    answered = pair.internal("POST", "/v1/clusters", json=expired)
    assert (answered.status_code, answered.json()["code"]) == (410, "id_expired")
    assert pair.cluster_row("clusters", expired["id"]) is None


def test_clocks_that_jump_while_creates_are_in_flight_lose_nothing_and_fail_nothing(pair, clocks):
    """Each create carries an Idempotency-Key and, when no answer came, is sent again with it, as
    a client does (a step of libfaketime's monotonic clock can end a connection being read)."""
    answers: Counter[tuple[int | None, str | None]] = Counter()
    acknowledged: set[str] = set()
    stop = threading.Event()

    def create_until_stopped():
        while not stop.is_set():
            key = str(uuid.uuid4())
            while True:
                try:
                    response = public(pair, "POST", "/v1/clusters", json=cluster_body(name="in-flight"),
                                      headers={"Idempotency-Key": key})
                    break
                except requests.ConnectionError as exc:
                    answers[None, type(exc).__name__] += 1
            if response.status_code == 503 and not response.headers.get("Retry-After"):
                answers[503, "without Retry-After"] += 1
            code = response.json().get("code") if response.status_code >= 400 else None
            answers[response.status_code, code] += 1
            if response.status_code in (200, 201):
                acknowledged.add(response.json()["id"])

    creators = [threading.Thread(target=create_until_stopped) for _ in range(4)]
    for creator in creators:
        creator.start()
    try:
        for clock, skew in [(clocks.platform, MINUTES_10), (clocks.platform, -DAYS_40), (clocks.cluster, -MINUTES_10),
                            (clocks.cluster, DAYS_40)]:
            before = sum(answers.values())
            clock.set(skew)  # while creates are in flight: some were minted, or judged, a moment before
            wait_for(lambda: sum(answers.values()) >= before + 20, timeout=20, what="creates answered under the skew")
            clock.set(0)
            count = len(acknowledged)
            wait_for(lambda: len(acknowledged) >= count + 5, timeout=20, what="creates acknowledged once it is right")
    finally:
        stop.set()
        for creator in creators:
            creator.join()

    # Never a 4xx, never a 500: 201, or a 503 with Retry-After that stored nothing. A request whose
    # clock jumped between its ID's check against the horizon and the check after its INSERT is
    # answered 503 unavailable (nothing stored, send it again), like any create that landed too late.
    assert {status for status, _ in answers} <= {200, 201, 503, None}, answers
    assert {answer for answer in answers if answer[0] == 503} <= {(503, "clock_skew"), (503, "unavailable")}, answers
    assert answers[503, "clock_skew"] > 0, answers
    all_synced_within(pair, 60)
    rows = set(pair.platform_rows("clusters"))
    assert rows == set(acknowledged), {"not acknowledged": rows - set(acknowledged), "answers": answers}
    assert all(pair.cluster_row("clusters", object_id) for object_id in acknowledged)


def test_both_services_serve_their_offsets_as_gauges(pair, clocks):
    pair.current.create("/v1/clusters", cluster_body())  # an answer from cluster_svc, with its Date
    assert offset(pair.platform_svc, "database") == 0  # a right clock reads 0, however long the round trip
    assert offset(pair.cluster_svc, "database") == 0
    clocks.cluster.set(-MINUTES_10)
    assert offset(pair.cluster_svc, "database") == pytest.approx(MINUTES_10, abs=5)
