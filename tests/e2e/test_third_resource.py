"""A resource the product does not ship, registered with one line per service,
gets the whole contract on real processes: notes on a firewall rule, two
levels deep (tests/e2e/notes.py, loaded through ``RESOURCE_MODULES``).

Nothing outside tests/ knows notes exist: the routes, the push, the
reconciler, repair and ``sync-status`` all come from the registry.
"""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from idempotent_pair_client.cluster import ClusterClient
from idempotent_pair_client.platform import ProblemError
from sqlalchemy import text

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tests.helpers import cluster_body, with_account
from tooling.pair import Pair
from tooling.testing import ROOT, fresh_database, uuid7_ago

NOTES_ENV = {"RESOURCE_MODULES": "tests.e2e.notes", "PYTHONPATH": str(ROOT)}
NOTE_FIELDS = ("cluster_id", "firewall_rule_id", "topic", "text", "generation")


@pytest.fixture(scope="module")
def module_pair(pg_server_url, tmp_path_factory):
    """One pair for the module, with the notes loaded: no test here kills, freezes or reconfigures a process."""
    cluster_db_url = fresh_database(pg_server_url, "cluster", migrations=CLUSTER_MIGRATIONS)
    platform_db_url = fresh_database(pg_server_url, "platform", migrations=PLATFORM_MIGRATIONS)
    # What a deployment's own migration would do for its added resource.
    subprocess.run(
        [sys.executable, "-m", "tests.e2e.notes", cluster_db_url, platform_db_url], cwd=ROOT, check=True
    )
    pair = Pair(
        cluster_db_url=cluster_db_url,
        platform_db_url=platform_db_url,
        workdir=tmp_path_factory.mktemp("notes"),
        env=NOTES_ENV,
    )
    with pair:
        yield pair


@pytest.fixture
def pair(module_pair, request):
    """The module's pair, with an account of this test's own."""
    return with_account(module_pair, request)


def internal_rule(pair: Pair) -> tuple[str, str]:
    """A cluster and a firewall rule created directly in cluster_svc; their IDs."""
    cluster_id, rule_id = str(uuid.uuid4()), str(uuid.uuid4())
    cluster = {"id": cluster_id, "team_id": str(uuid.uuid4()), **cluster_body()}
    assert pair.internal("POST", "/v1/clusters", json=cluster).status_code == 201
    rule = {"id": rule_id, "cidr": "10.0.0.0/8"}
    assert pair.internal("POST", f"/v1/clusters/{cluster_id}/firewall-rules", json=rule).status_code == 201
    return cluster_id, rule_id


def test_cluster_svc_serves_the_added_resource_with_the_whole_contract(pair):
    cluster_id, rule_id = internal_rule(pair)
    notes = f"/v1/clusters/{cluster_id}/firewall-rules/{rule_id}/notes"
    note = {"id": str(uuid.uuid4()), "topic": "audit", "text": "checked"}

    created = pair.internal("POST", notes, json=note)
    assert created.status_code == 201, created.text
    assert created.headers["Location"].endswith(f"{notes}/{note['id']}")
    assert created.json()["firewall_rule_id"] == rule_id and created.json()["cluster_id"] == cluster_id

    replayed = pair.internal("POST", notes, json={**note, "text": "mutable, so a replay"})
    assert (replayed.status_code, replayed.headers.get("Idempotent-Replayed")) == (200, "true")
    assert replayed.json()["text"] == "checked"  # the current state, not the replay's

    conflict = pair.internal("POST", notes, json={**note, "topic": "owner"})
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "id_conflict"
    assert [c["field"] for c in conflict.json()["conflicts"]] == ["topic"]

    item = f"{notes}/{note['id']}"
    applied = pair.internal("PUT", item, json={"generation": 3, "text": "third"})
    stale = pair.internal("PUT", item, json={"generation": 2, "text": "second"})
    assert applied.json()["generation"] == 3
    assert (stale.status_code, stale.json()["text"], stale.json()["generation"]) == (200, "third", 3)
    assert pair.internal("GET", item).json()["text"] == "third"

    listed = pair.internal("GET", notes).json()["items"]
    assert [n["id"] for n in listed] == [note["id"]]

    # The chain is checked whole: the rule under another cluster is no parent of anything.
    other_cluster, _ = internal_rule(pair)
    wrong = f"/v1/clusters/{other_cluster}/firewall-rules/{rule_id}/notes"
    assert pair.internal("POST", wrong, json={"id": str(uuid.uuid4()), "topic": "audit"}).status_code == 404
    assert pair.internal("GET", f"{wrong}/{note['id']}").status_code == 404

    batch = pair.internal("POST", f"{notes}/batch", json={"items": [
        {"id": str(uuid.uuid4()), "topic": "owner"},
        note,
        {**note, "topic": "expiry"},
        {"id": str(uuid.uuid4()), "topic": "not-a-topic"},
    ]})
    assert batch.status_code == 200
    assert [result["status"] for result in batch.json()["results"]] == [201, 200, 409, 422]

    assert pair.internal("DELETE", item).status_code == 204
    assert pair.internal("DELETE", item).json()["code"] == "gone"
    assert pair.internal("GET", item).status_code == 410
    late = pair.internal("POST", notes, json=note)
    assert (late.status_code, late.json()["code"]) == (410, "gone")
    never_seen = pair.internal("DELETE", f"{notes}/{uuid.uuid4()}")
    assert never_seen.status_code == 404

    everything = pair.internal("GET", "/v1/notes?include_deleted=true&limit=500").json()["items"]
    mine = {n["id"]: n for n in everything if n["firewall_rule_id"] == rule_id}
    assert mine[note["id"]]["deleted_at"] is not None
    assert all(n["team_id"] for n in mine.values() if n["cluster_id"])

    # Deleting the cluster at the top makes everything under it gone, two levels down.
    survivor = batch.json()["results"][0]["object"]["id"]
    assert pair.internal("DELETE", f"/v1/clusters/{cluster_id}").status_code == 204
    assert pair.internal("GET", f"{notes}/{survivor}").status_code == 410

    metrics = pair.internal("GET", "/metrics").text
    assert 'idempotent_creates_total{outcome="created",resource="note"}' in metrics
    assert 'idempotent_updates_total{outcome="stale",resource="note"} 1.0' in metrics


def test_the_platform_pushes_repairs_and_reports_the_added_resource(pair):
    cluster = pair.api("POST", "/v1/clusters", json=cluster_body())
    rule = pair.api("POST", f"/v1/clusters/{cluster.json()['id']}/firewall-rules", json={"cidr": "10.1.0.0/16"})
    notes = f"/v1/clusters/{cluster.json()['id']}/firewall-rules/{rule.json()['id']}/notes"
    note = pair.api("POST", notes, json={"topic": "owner", "text": "team db"}, headers={"Idempotency-Key": "n-1"})
    assert (note.status_code, note.json()["sync_state"]) == (201, "synced"), note.text
    note_id = note.json()["id"]
    again = pair.api("POST", notes, json={"topic": "owner", "text": "team db"}, headers={"Idempotency-Key": "n-1"})
    assert (again.status_code, again.json()["id"]) == (200, note_id)

    patched = pair.api("PATCH", f"{notes}/{note_id}", json={"text": "owned by data"})
    assert (patched.json()["generation"], patched.json()["sync_state"]) == (2, "synced")
    assert_downstream_matches(pair, note_id)

    # cluster_svc loses the note behind the platform's back: repair finds it, the reconciler restores it.
    with pair.cluster_engine.begin() as conn:
        conn.execute(text("DELETE FROM notes WHERE id = :id"), {"id": note_id})
    repaired = pair.cli("repair")  # every account's objects: this module's others are all in line
    assert repaired.returncode == 0, repaired.stderr
    assert f"missing note {note_id}" in repaired.stdout
    status = pair.cli("sync-status")
    assert "notes: 0 synced, 1 pending, 0 failed, 0 stalled" in status.stdout, status.stdout
    reconciled = pair.cli("reconcile", "--once")
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert_downstream_matches(pair, note_id)
    assert "notes: 1 synced, 0 pending, 0 failed, 0 stalled" in pair.cli("sync-status").stdout

    assert pair.api("DELETE", f"{notes}/{note_id}").status_code == 204
    assert pair.api("GET", f"{notes}/{note_id}").status_code == 410
    assert pair.cluster_svc_rows("notes")[note_id]["deleted_at"] is not None


def test_a_parent_deleted_on_the_platform_takes_its_grandchildren_along(pair):
    cluster = pair.api("POST", "/v1/clusters", json=cluster_body()).json()
    rule = pair.api("POST", f"/v1/clusters/{cluster['id']}/firewall-rules", json={"cidr": "10.2.0.0/16"}).json()
    notes = f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}/notes"
    note = pair.api("POST", notes, json={"topic": "expiry"}).json()

    assert pair.api("DELETE", f"/v1/clusters/{cluster['id']}").status_code == 204
    assert pair.api("GET", f"{notes}/{note['id']}").status_code == 410
    assert pair.platform_rows("notes")[note["id"]]["deleted_at"] is not None
    assert pair.cluster_svc_rows("notes")[note["id"]]["deleted_at"] is not None
    assert pair.api("POST", notes, json={"topic": "audit"}).status_code == 410


def test_the_clients_call_the_added_resource_with_no_change_of_their_own(pair):
    """PlatformClient and ClusterClient know paths, not resources: the notes need nothing of them."""
    api = pair.current.client(retry_for=5.0)
    cluster = api.create("/v1/clusters", cluster_body())
    rule = api.create(f"/v1/clusters/{cluster['id']}/firewall-rules", {"cidr": "10.3.0.0/16"})
    notes = f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}/notes"
    note = api.create(notes, {"topic": "owner", "text": "team db"}, idempotency_key="note-1")
    assert api.create(notes, {"topic": "owner", "text": "team db"}, idempotency_key="note-1")["id"] == note["id"]
    assert api.find_by_idempotency_key(notes, "note-1")["id"] == note["id"]
    assert api.update(f"{notes}/{note['id']}", {"text": "owned by data"})["generation"] == 2
    assert [n["id"] for n in api.list(notes, limit=1)] == [note["id"]]
    api.delete(f"{notes}/{note['id']}")
    api.delete(f"{notes}/{note['id']}")  # 410: deleted already, which is done
    with pytest.raises(ProblemError) as raised:
        api.get(f"{notes}/{note['id']}")
    assert (raised.value.status, raised.value.code) == (410, "gone")

    cluster_id, rule_id = internal_rule(pair)
    notes = f"/v1/clusters/{cluster_id}/firewall-rules/{rule_id}/notes"
    note = {"id": str(uuid.uuid4()), "topic": "audit", "text": "checked"}
    with ClusterClient(pair.cluster_svc.url, token=pair.token, retry_for=5.0) as internal:
        assert internal.create(notes, note)["firewall_rule_id"] == rule_id
        other = {"id": str(uuid.uuid4()), "topic": "owner"}
        created, conflict, new = internal.create_batch(notes, [note, {**note, "topic": "expiry"}, other])
        assert (created["id"], conflict.code, new["id"]) == (note["id"], "id_conflict", other["id"])
        assert internal.update(f"{notes}/{note['id']}", {"text": "third"}, generation=3)["generation"] == 3
        assert [n["id"] for n in internal.list(notes, limit=1)] == sorted([note["id"], other["id"]])
        internal.delete(f"{notes}/{note['id']}")
        internal.delete(f"{notes}/{note['id']}")  # 410: done as well


def assert_downstream_matches(pair: Pair, note_id: str) -> None:
    upstream, downstream = pair.platform_rows("notes")[note_id], pair.cluster_svc_rows("notes")[note_id]
    assert {f: str(downstream[f]) for f in NOTE_FIELDS} == {f: str(upstream[f]) for f in NOTE_FIELDS}
    assert upstream["sync_state"] == "synced"


def test_a_purge_dry_run_counts_what_the_purge_then_removes_two_levels_down(pair):
    """A parent goes only when nothing under it, at any depth, is left; a dry run judges every
    level the same way. Two trees of tombstones in cluster_svc whose cluster and rule IDs are
    29 days old, purged with a 28-day horizon: in one the note is as old (the whole tree goes),
    in the other it is new (its tombstone stays, and with it the rule and the cluster above)."""
    day = 86_400

    def tree(note_age: float) -> tuple[str, str, str]:
        cluster_id, rule_id, note_id = str(uuid7_ago(29 * day)), str(uuid7_ago(29 * day)), str(uuid7_ago(note_age))
        cluster = {"id": cluster_id, "team_id": str(uuid.uuid4()), **cluster_body()}
        rules = f"/v1/clusters/{cluster_id}/firewall-rules"
        notes = f"{rules}/{rule_id}/notes"
        assert pair.internal("POST", "/v1/clusters", json=cluster).status_code == 201
        assert pair.internal("POST", rules, json={"id": rule_id, "cidr": "10.0.0.0/8"}).status_code == 201
        assert pair.internal("POST", notes, json={"id": note_id, "topic": "audit"}).status_code == 201
        for path in (f"{notes}/{note_id}", f"{rules}/{rule_id}", f"/v1/clusters/{cluster_id}"):
            assert pair.internal("DELETE", path).status_code == 204
        return cluster_id, rule_id, note_id

    gone, kept = tree(note_age=29 * day), tree(note_age=0)
    horizon = {"ID_HORIZON_SECONDS": str(28 * day)}

    dry = pair.cluster_cli("purge", "--dry-run", env=horizon)
    real = pair.cluster_cli("purge", env=horizon)

    assert dry.returncode == real.returncode == 0, dry.stderr + real.stderr
    assert dry.stdout.startswith("purge: would remove 1 clusters, 1 firewall_rules, 1 notes;"), dry.stdout
    assert real.stdout.startswith("purge: removed 1 clusters, 1 firewall_rules, 1 notes;"), real.stdout
    for table, gone_id, kept_id in zip(("clusters", "firewall_rules", "notes"), gone, kept):
        rows = pair.cluster_svc_rows(table)
        assert gone_id not in rows and rows[kept_id]["deleted_at"] is not None
