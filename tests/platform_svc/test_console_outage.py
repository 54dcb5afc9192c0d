"""The console while cluster_svc does not answer (design: the console "closes every incident it
shows"): an object page still answers within the console's 2 s, shows every platform field and
says cluster_svc did not answer, instead of guessing its state; the overview says whether
cluster_svc answers as each process of the platform last saw it."""
from __future__ import annotations

import os
import queue
import re
import socket
import time

import pytest
from sqlalchemy import text

from platform_svc.console import CONSOLE_POLICY
from platform_svc.models import RESOURCES
from platform_svc.operations.sightings import Sightings
from platform_svc.push import content
from tests.helpers import authed_client, cluster_body, make_account
from tests.platform_svc.conftest import _app, _dispose
from tests.platform_svc.test_console_auth import logged_in, operator  # noqa: F401 (a fixture)
from tooling.testing import wait_for


@pytest.fixture(scope="module")
def silent_app(platform_db_url):
    """platform_svc whose cluster_svc accepts connections and never answers (a SIGSTOPped one)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    app = _app(platform_db_url, f"http://127.0.0.1:{listener.getsockname()[1]}")
    app.extensions["writes"].pusher.breaker = None
    yield app
    _dispose(app)
    listener.close()


def test_an_object_page_during_an_outage_shows_the_platform_side_and_says_cluster_svc_did_not_answer(
    silent_app, platform_database, operator  # noqa: F811
):
    _, api_key = make_account(platform_database, "outage page")
    created = authed_client(silent_app, api_key).post("/v1/clusters", json=cluster_body(name="seen-in-the-dark"))
    assert created.status_code == 201
    browser, _ = logged_in(silent_app, operator)

    started = time.monotonic()
    page = browser.get(f"/console/objects/clusters/{created.json['id']}")
    took = time.monotonic() - started

    text = page.get_data(as_text=True)
    assert page.status_code == 200 and took < CONSOLE_POLICY.longest_call() + 1
    assert "seen-in-the-dark" in text  # every platform field, from the platform's own row...
    assert all(f"<th>{name}</th>" in text for name in content.compared(RESOURCES.by_table("clusters")))
    assert "did not answer" in text and "no row" not in text and "holds none" not in text  # ...theirs unknown
    assert text.count("cluster_svc did not answer:") == 1  # the cause once, not twice


def test_an_object_page_counts_a_long_pending_row_as_stalled_and_its_past_next_try_as_due_now(
    silent_app, platform_database, platform_engine, operator  # noqa: F811
):
    _, api_key = make_account(platform_database, "stalled page")
    created = authed_client(silent_app, api_key).post("/v1/clusters", json=cluster_body(name="waiting-long"))
    with platform_engine.begin() as conn:  # pending for an hour, its next try a minute ago (the rows page's stalled)
        conn.execute(text("UPDATE clusters SET updated_at = now() - interval '1 hour',"
                          " next_attempt_at = now() - interval '1 minute' WHERE id = :id"), {"id": created.json["id"]})
    browser, _ = logged_in(silent_app, operator)

    text_ = browser.get(f"/console/objects/clusters/{created.json['id']}").get_data(as_text=True)

    assert '<span class="state stalled">stalled</span>' in text_
    assert "next try due now" in text_


def test_the_overview_says_whether_cluster_svc_answers_as_each_process_last_saw_it(
    silent_app, platform_database, platform_engine, operator  # noqa: F811
):
    with platform_engine.begin() as conn:  # another process, on another host, saw it serve a minute ago
        conn.execute(text(
            "INSERT INTO cluster_svc_sightings (observer, role, served, what, seen_at, since)"
            " VALUES ('other-host:4242', 'reconciler', true, 'GET /v1/clusters?limit=1: served (a probe)',"
            " now() - interval '1 minute', now() - interval '1 hour')"
            " ON CONFLICT (observer) DO UPDATE SET served = true, seen_at = excluded.seen_at"
        ))
    _, api_key = make_account(platform_database, "sighting")
    created = authed_client(silent_app, api_key).post("/v1/clusters", json=cluster_body(name="unseen"))
    assert created.status_code == 201 and created.json["sync_state"] == "pending"  # this worker's push got nothing
    browser, _ = logged_in(silent_app, operator)

    def shown():
        page = browser.get("/console/").get_data(as_text=True)
        return page if "Not answering" in page else None

    page = wait_for(shown, timeout=10, what="this worker's sighting written by its thread")

    assert re.search(r"Not answering</span>: the last call did not get an answer \d+s ago", page), page
    assert "by the web <code>" in page  # who saw it: this worker
    rows = re.findall(r"<tr><td[^>]*><code>([^<]+)</code></td><td[^>]*>(\w+)</td>\s*<td[^>]*>.*?>(served|did not answer)<",
                      page)
    assert ("other-host:4242", "reconciler", "served") in rows  # every process's view, from any worker
    assert any(role == "web" and seen == "did not answer" for _, role, seen in rows)


def test_a_sighting_is_written_once_per_change_and_its_since_moves_only_when_what_is_seen_changes(
    platform_database, platform_engine
):
    clock = [0.0]
    sightings = Sightings(platform_database, "reconciler", clock=lambda: clock[0])
    written: queue.Queue[bool] = queue.Queue()
    sightings.write = lambda served, what: written.put(served) or True  # noqa: E731 (what the thread would write)

    for served, at, writes in ((False, 0.0, True), (False, 1.0, False), (False, 29.0, False), (True, 29.5, True),
                               (True, 30.0, False), (True, 60.0, True)):
        clock[0] = at
        sightings.saw(served, "POST /v1/clusters: connection refused" if not served else "POST /v1/clusters: 201")
        if writes:  # the change, the change back, then the same again once 30 s had passed
            assert written.get(timeout=5) is served
    assert written.empty()

    del sightings.write  # the real write, twice the same and then a change
    query = text("SELECT since, seen_at FROM cluster_svc_sightings WHERE observer = :me")
    me = {"me": f"{socket.gethostname()}:{os.getpid()}"}
    assert sightings.write(False, "a") and sightings.write(False, "b")
    with platform_engine.connect() as conn:
        first = conn.execute(query, me).one()
    assert sightings.write(False, "c")
    with platform_engine.connect() as conn:
        again = conn.execute(query, me).one()
    assert sightings.write(True, "d")
    with platform_engine.connect() as conn:
        changed = conn.execute(query, me).one()
    assert again.since == first.since < changed.since and again.seen_at > first.seen_at


class Prober:
    """A client whose probes cluster_svc serves (or not), telling the sightings as the real one does."""

    def __init__(self, served: bool) -> None:
        self.served, self.seen, self.probes = served, None, queue.Queue()

    def probe(self, path: str, timeout: float = 1.0) -> bool:
        self.probes.put(path)
        self.seen(self.served, f"GET {path}: a probe")
        return self.served


def test_a_process_whose_last_call_was_not_served_probes_until_it_is_and_writes_that(platform_database):
    sightings = Sightings(platform_database, "web", probe_every=0.05)
    written: queue.Queue[bool] = queue.Queue()
    sightings.write = lambda served, what: written.put(served) or True  # noqa: E731 (what the thread would write)
    prober = Prober(served=False)
    sightings.watching(prober)

    sightings.saw(False, "POST /v1/clusters: timed out")  # and then no call needs cluster_svc
    assert written.get(timeout=5) is False
    assert prober.probes.get(timeout=5).startswith("/v1/clusters?limit=1")  # probed while it does not answer
    prober.served = True  # cluster_svc answers again

    assert True in (written.get(timeout=5) for _ in range(100))  # the overview heals without a call of the worker's
