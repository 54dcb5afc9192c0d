"""Every shown state can be listed, from the first second, on the console's rows page and by
``sync-status --state``; an unknown state is refused, never ignored; and an abandoned row is a
state of its own on every surface (the counts, the metrics, the public API's 410), never synced."""
from __future__ import annotations

import re

from click.testing import CliRunner
from sqlalchemy import text

from platform_svc.cli import main
from platform_svc.models import RESOURCES
from platform_svc.operations.status import count_states
from platform_svc.states import STALLED_AFTER, SyncState
from tests.helpers import cluster_body
from tests.platform_svc.test_console_auth import logged_in, operator  # noqa: F401 (a fixture)
from tooling.pair import TOKEN

CLUSTERS = RESOURCES["cluster"]


def abandoned_by_hand(platform_engine, object_id: str) -> None:
    """As ``platform-svc abandon`` closes a failed row (platform_svc.operations.abandon)."""
    with platform_engine.begin() as conn:
        conn.execute(text("UPDATE clusters SET deleted_at = now(), delete_synced_at = now(), abandoned_at = now(),"
                          " sync_error = 'abandoned by alice; it failed with: POST /v1/clusters: 409 id_conflict'"
                          " WHERE id = :id"), {"id": object_id})


def test_a_pending_row_is_listed_from_its_first_second(app, offline_client, operator):  # noqa: F811
    pending = offline_client.post("/v1/clusters", json=cluster_body(name="just-made")).get_json()["id"]
    browser, _ = logged_in(app, operator)

    listed = browser.get("/console/rows?resource=clusters&state=pending").get_data(as_text=True)
    needing = browser.get("/console/rows?resource=clusters").get_data(as_text=True)

    assert pending in listed and '<span class="state pending">pending</span>' in listed
    assert pending not in needing  # pending is not (yet) a person's business


def test_an_unknown_state_is_refused_never_ignored(app, operator):  # noqa: F811
    browser, _ = logged_in(app, operator)

    for asked in ("synced", "pendng", "FAILED"):
        answered = browser.get(f"/console/rows?resource=clusters&state={asked}")
        assert answered.status_code == 400 and b"state must be one of pending, stalled, failed, abandoned" in \
            answered.data, asked


def test_an_abandoned_row_is_its_own_state_everywhere(app, client, offline_client, platform_engine, operator):  # noqa: F811
    kept = offline_client.post("/v1/clusters", json=cluster_body(name="closed")).get_json()["id"]
    abandoned_by_hand(platform_engine, kept)
    browser, _ = logged_in(app, operator)

    with platform_engine.connect() as conn:
        counts, _ = count_states(db_session=conn, resource=CLUSTERS, stalled_after=STALLED_AFTER)
        column = conn.execute(text("SELECT sync_state FROM clusters WHERE id = :id"), {"id": kept}).scalar()
    listed = browser.get("/console/rows?resource=clusters&state=abandoned").get_data(as_text=True)
    page = browser.get(f"/console/objects/clusters/{kept}").get_data(as_text=True)
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).get_data(as_text=True)
    gone = offline_client.get(f"/v1/clusters/{kept}")

    assert column == "synced" and counts[SyncState.ABANDONED] >= 1  # stored as settled, counted apart
    assert kept in listed and '<span class="state abandoned">abandoned</span>' in listed
    assert '<span class="state abandoned">abandoned</span>' in page
    assert 'sync_rows{resource="cluster",state="abandoned"}' in metrics
    assert gone.status_code == 410
    assert "abandoned by an operator" in gone.get_json()["detail"] and "409 id_conflict" in gone.get_json()["detail"]
    assert "alice" not in gone.get_json()["detail"]  # why it was abandoned, not who did it


def test_sync_status_lists_the_rows_of_one_state_and_refuses_another(offline_client, platform_db_url,
                                                                    platform_engine):
    pending = offline_client.post("/v1/clusters", json=cluster_body(name="listed")).get_json()["id"]
    closed = offline_client.post("/v1/clusters", json=cluster_body(name="closed")).get_json()["id"]
    abandoned_by_hand(platform_engine, closed)
    failed = offline_client.post("/v1/clusters", json=cluster_body(name="refused")).get_json()["id"]
    with platform_engine.begin() as conn:  # failed by its first push, with no transient failure before
        conn.execute(text("UPDATE clusters SET sync_failed_at = now(), sync_error = 'POST /v1/clusters: 422',"
                          " attempts = 0 WHERE id = :id"), {"id": failed})
    env = {"PLATFORM_DATABASE_URL": platform_db_url}

    listed = CliRunner().invoke(main, ["sync-status", "--state", "pending", "--limit", "1000"], env=env)
    abandoned = CliRunner().invoke(main, ["sync-status", "--state", "abandoned", "--limit", "1000"], env=env)
    failures = CliRunner().invoke(main, ["sync-status", "--state", "failed", "--limit", "1000"], env=env)
    refused = CliRunner().invoke(main, ["sync-status", "--state", "synced"], env=env)

    assert listed.exit_code == 0 and f"  pending {pending} last written" in listed.output, listed.output
    assert closed not in listed.output and f"  abandoned {closed}" in abandoned.output
    assert " abandoned; oldest pending" in listed.output  # the counts name the fifth state
    assert re.search(rf"  failed {failed} last written \S+ ago, 1 tries,", failures.output), failures.output
    assert refused.exit_code == 2 and "'synced' is not one of" in refused.output


def test_a_rule_waiting_for_its_cluster_says_so_and_a_failed_row_counts_its_failing_try(
    app, offline_client, platform_engine, operator  # noqa: F811
):
    cluster = offline_client.post("/v1/clusters", json=cluster_body(name="unconfirmed")).get_json()["id"]
    rule = offline_client.post(f"/v1/clusters/{cluster}/firewall-rules", json={"cidr": "10.0.0.0/8"}).get_json()["id"]
    with platform_engine.begin() as conn:  # failed by its first push, with no transient failure before
        conn.execute(text("UPDATE clusters SET sync_failed_at = now(), sync_error = 'POST /v1/clusters: 422',"
                          " attempts = 0 WHERE id = :id"), {"id": cluster})
    browser, _ = logged_in(app, operator)

    rules = browser.get("/console/rows?resource=firewall-rules&state=pending").get_data(as_text=True)
    page = browser.get(f"/console/objects/firewall-rules/{rule}").get_data(as_text=True)
    failed = browser.get("/console/rows?resource=clusters&state=failed").get_data(as_text=True)

    [card] = [part for part in rules.split("<tr")[1:] if rule in part]
    assert "waiting for its cluster" in card and "failed</a>" in card and "due now" not in card
    assert "once its cluster is confirmed (it is failed)" in page and "due now" not in page
    [row] = [part for part in failed.split("<tr")[1:] if cluster in part]
    assert '<td class="num" data-label="Tries">1</td>' in row  # the push that failed it is a try
