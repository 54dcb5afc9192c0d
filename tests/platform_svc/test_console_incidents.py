"""The console closes an ``id_conflict`` from the page: the object page says cluster_svc holds
another's object (never that a repair would overwrite it), and "Abandon" closes the row without
touching that object (platform_svc.operations.abandon; the CLI's own test: tests/e2e/test_synced_is_a_proof.py)."""
from __future__ import annotations

import requests
from sqlalchemy import text

from tests.helpers import cluster_body, internal_cluster_body
from tests.platform_svc.test_console_auth import csrf_of, logged_in, operator  # noqa: F401 (a fixture)
from tooling.pair import TOKEN


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
    done = browser.post("/console/abandon", data={"resource": "clusters", "id": x, "csrf_token": csrf_of(page.encode())})

    assert done.status_code == 200 and "Abandoned: 1 row closed" in done.get_data(as_text=True)
    with platform_engine.connect() as conn:
        row = conn.execute(text("SELECT sync_state, deleted_at, abandoned_at FROM clusters WHERE id = :id"),
                           {"id": x}).one()
    assert row.sync_state == "synced" and row.deleted_at is not None and row.abandoned_at is not None
    kept = requests.get(f"{cluster_svc.url}/v1/clusters/{x}", headers=auth, timeout=10)
    assert kept.status_code == 200 and kept.json()["team_id"] == theirs["team_id"] and kept.json()["name"] == "theirs"
