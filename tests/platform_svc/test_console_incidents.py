"""The console closes the incidents it shows from the page: an ``id_conflict``'s object page says
cluster_svc holds another's object (never that a repair would overwrite it), and "Abandon" closes
the row without touching that object (platform_svc.operations.abandon; the CLI's own test:
tests/e2e/test_synced_is_a_proof.py); a real repair run asked for on the page runs whatever holds
the lease on the periodic passes (platform_svc.operations.runs)."""
from __future__ import annotations

import re
import threading

import requests
from sqlalchemy import text

from platform_svc.operations.leadership import Leadership
from platform_svc.operations.runs import RepairRuns
from tests.helpers import cluster_body, internal_cluster_body
from tests.platform_svc.test_console_auth import csrf_of, logged_in, operator  # noqa: F401 (a fixture)
from tooling.pair import TOKEN
from tooling.testing import wait_for


def test_an_id_conflict_reads_as_anothers_object_and_abandon_closes_it_leaving_theirs_alone(
    app, offline_client, cluster_svc, platform_engine, operator  # noqa: F811
):
    x = offline_client.post("/v1/clusters", json=cluster_body(name="mine")).get_json()["id"]  # pending
    theirs = internal_cluster_body(id=x, name="theirs")  # another team takes the ID downstream
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert requests.post(f"{cluster_svc.url}/v1/clusters", json=theirs, headers=auth, timeout=10).status_code == 201
    with platform_engine.begin() as conn:  # as the push's 409 recorded it
        conn.execute(text("UPDATE clusters SET sync_failed_at = now(), sync_error = 'POST /v1/clusters:"
                          " 409 id_conflict: taken' WHERE id = :id"), {"id": x})
    browser, _ = logged_in(app, operator)

    page = browser.get(f"/console/objects/clusters/{x}").get_data(as_text=True)
    assert "cluster_svc holds another object under this ID" in page and "another's object: left as it is" in page
    assert "a repair pushes the platform" not in page  # nothing suggests writing to their object
    asked = browser.post("/console/abandon", data={"resource": "clusters", "id": x, "csrf_token": csrf_of(page.encode())})
    confirmation = asked.get_data(as_text=True)
    assert asked.status_code == 200 and "Abandon cluster" in confirmation and x in confirmation
    assert "cannot be undone" in confirmation and 'class="danger"' in confirmation
    assert _state(platform_engine, x) == "failed"  # a first POST asks; nothing is abandoned yet
    forged = browser.post("/console/abandon", data={"resource": "clusters", "id": x, "confirm": "0" * 64,
                                                    "csrf_token": csrf_of(page.encode())})
    assert "cannot be undone" in forged.get_data(as_text=True) and _state(platform_engine, x) == "failed"
    done = browser.post("/console/abandon", data=_form_of(confirmation))

    assert done.status_code == 200 and "Abandoned: 1 row closed" in done.get_data(as_text=True)
    with platform_engine.connect() as conn:
        row = conn.execute(text("SELECT sync_state, deleted_at, abandoned_at FROM clusters WHERE id = :id"),
                           {"id": x}).one()
    assert row.sync_state == "synced" and row.deleted_at is not None and row.abandoned_at is not None
    kept = requests.get(f"{cluster_svc.url}/v1/clusters/{x}", headers=auth, timeout=10)
    assert kept.status_code == 200 and kept.json()["team_id"] == theirs["team_id"] and kept.json()["name"] == "theirs"


def _state(platform_engine, object_id: str) -> str:
    with platform_engine.connect() as conn:
        return conn.execute(text("SELECT sync_state FROM clusters WHERE id = :id"), {"id": object_id}).scalar()


def _form_of(page: str) -> dict[str, str]:
    """The hidden fields of the confirmation page's form: what its button posts."""
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page))


def _ask_for_a_real_run(browser) -> str:
    page = browser.get("/console/repair")
    asked = browser.post("/console/repair", data={"mode": "repair", "csrf_token": csrf_of(page.data)})
    confirmation = asked.get_data(as_text=True)
    assert asked.status_code == 200 and "Start a real repair run?" in confirmation, confirmation
    assert "overwriting cluster_svc" in confirmation and "synced clusters" in confirmation
    started = browser.post("/console/repair", data=_form_of(confirmation))
    assert started.status_code == 303, started.data
    return started.headers["Location"]


def _finished(browser, run: str) -> str | None:
    """The run's page once it no longer reloads itself (ended, or stopped moving)."""
    page = browser.get(run).get_data(as_text=True)
    return None if 'http-equiv="refresh"' in page else page


def test_a_real_run_asked_for_while_another_process_leads_is_run_by_that_leader_and_recorded_as_its_pass(
    app, platform_database, operator  # noqa: F811
):
    leader = Leadership(platform_database, holder="reconciler-under-test")  # as a running reconciler holds it
    leader.renew()
    assert leader.holding()
    try:
        browser, _ = logged_in(app, operator)
        run = _ask_for_a_real_run(browser)

        waiting = browser.get(run).get_data(as_text=True)
        assert "waiting for the leader" in waiting and "<code>reconciler-under-test</code>" in waiting

        console = app.extensions["console"]  # what the leading reconciler's duty does every second
        RepairRuns(console.database, console.client, console.horizon).run_requested(leader, threading.Event())
        page = _finished(browser, run)
    finally:
        leader.release()

    assert "<dd>finished" in page and "in <code>reconciler-under-test</code>" in page and "Repair run</h1>" in page
    overview = browser.get("/console/").get_data(as_text=True)
    assert re.search(r"Last repair pass</dt>\s*<dd>.* ago by <code>reconciler-under-test</code>: repair: ", overview)


def test_a_real_run_asked_for_while_no_process_leads_takes_the_lease_here_and_gives_it_back(
    app, platform_database, operator  # noqa: F811
):
    browser, _ = logged_in(app, operator)

    run = _ask_for_a_real_run(browser)
    page = wait_for(lambda: _finished(browser, run), timeout=60, what="the real run finished")

    assert "<dd>finished" in page and "in <code>" in page and "Repair run</h1>" in page

    def given_back() -> bool:  # once the run's end is recorded, its thread gives the lease back
        with platform_database.engine.connect() as conn:
            return conn.execute(text("SELECT expires_at <= now() FROM leases WHERE name = 'periodic-passes'")).scalar()

    # Well within the lease's 15 s, so that its running out by itself cannot pass for giving it back.
    wait_for(given_back, timeout=5, what="the lease given back: a reconciler takes over at its next try")
