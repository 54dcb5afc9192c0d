"""Purge (shared.purge with cluster_svc's rule): tombstones whose ID is past the
horizon go, in short batches that skip what others hold; nothing else goes.

Old objects are made by an app on the same database whose horizon reaches back
a century, as they were made when they were young; the purge runs with the
default 30-day horizon. Races are forced by holding real transactions open,
never by timing.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid

import pytest
from sqlalchemy import text

from cluster_svc import Settings, create_app
from cluster_svc.models import RESOURCES
from cluster_svc.tombstones import purgeable
from shared.db import Database
from shared.horizon import Horizon
from shared.purge import Purger, deleted_window, remove
from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.pair import TOKEN
from tooling.testing import assert_reads_through, console_script, db_row, uuid7_ago

CLUSTER = RESOURCES["cluster"]

DAY = 86400
OLD = 31 * DAY


@pytest.fixture(scope="module")
def old_times(cluster_db_url):
    settings = Settings(database_url=cluster_db_url, internal_token=TOKEN, id_horizon_seconds=100 * 365 * DAY)
    app = create_app(settings, testing=True)
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    yield client
    app.extensions["database"].dispose()


@pytest.fixture(scope="module")
def database(cluster_db_url):
    database = Database(cluster_db_url, pool_size=2)
    yield database
    database.dispose()


@pytest.fixture
def purger(database):
    return Purger(database, RESOURCES, Horizon(), purgeable, batch=7)  # small windows: many batches


def made(client, path, body):
    response = client.post(path, json=body)
    assert response.status_code == 201, response.get_json()
    return body["id"]


def old_cluster(old_times):
    return made(old_times, "/v1/clusters", internal_cluster_body(id=str(uuid7_ago(OLD))))


def deleted(client, path):
    assert client.delete(path).status_code == 204


def test_purge_removes_expired_tombstones_and_keeps_everything_else(client, old_times, engine, purger):
    live_old = old_cluster(old_times)
    deleted_old = old_cluster(old_times)
    deleted(client, f"/v1/clusters/{deleted_old}")
    bare_old = uuid7_ago(OLD)
    assert old_times.delete(f"/v1/clusters/{bare_old}").status_code == 404  # a bare tombstone
    deleted_fresh = made(client, "/v1/clusters", internal_cluster_body(id=str(uuid7_ago(0))))
    deleted(client, f"/v1/clusters/{deleted_fresh}")
    deleted_v4 = made(client, "/v1/clusters", internal_cluster_body())
    deleted(client, f"/v1/clusters/{deleted_v4}")
    just_expired = made(old_times, "/v1/clusters", internal_cluster_body(id=str(uuid7_ago(30 * DAY + 60))))
    deleted(client, f"/v1/clusters/{just_expired}")  # past the horizon, not yet past horizon + grace

    report = purger.run()

    assert db_row(engine, "clusters", deleted_old) is None
    assert db_row(engine, "clusters", bare_old) is None
    assert db_row(engine, "clusters", live_old)["deleted_at"] is None
    for kept in (deleted_fresh, deleted_v4, just_expired):
        assert db_row(engine, "clusters", kept)["deleted_at"] is not None, kept
    assert report.removed["cluster"] >= 2
    assert report.summary().startswith("purge: removed ")
    # Nothing can bring them back: a late create of a purged ID is refused, and stores nothing.
    for purged in (deleted_old, bare_old):
        response = client.post("/v1/clusters", json=internal_cluster_body(id=str(purged)))
        assert (response.status_code, response.get_json()["code"]) == (410, "id_expired")
        assert db_row(engine, "clusters", purged) is None


def test_children_go_before_their_parents_and_a_parent_stays_while_a_child_is_left(
    client, old_times, engine, purger
):
    whole = old_cluster(old_times)
    old_rule = made(old_times, f"/v1/clusters/{whole}/firewall-rules", internal_rule_body(id=str(uuid7_ago(OLD))))
    deleted(client, f"/v1/clusters/{whole}")  # its rule is a tombstone too
    held = old_cluster(old_times)
    young_rule = made(client, f"/v1/clusters/{held}/firewall-rules", internal_rule_body(id=str(uuid7_ago(0))))
    deleted(client, f"/v1/clusters/{held}")

    purger.run()

    assert db_row(engine, "firewall_rules", old_rule) is None and db_row(engine, "clusters", whole) is None
    assert db_row(engine, "firewall_rules", young_rule) is not None  # not expired: it stays
    assert db_row(engine, "clusters", held) is not None  # and its cluster with it
    response = client.get(f"/v1/clusters/{whole}/firewall-rules/{old_rule}")
    assert (response.status_code, response.get_json()["code"]) == (410, "id_expired")


def test_a_dry_run_counts_and_removes_nothing(client, old_times, engine, purger):
    doomed = old_cluster(old_times)
    deleted(client, f"/v1/clusters/{doomed}")

    report = purger.run(dry_run=True)

    assert report.removed["cluster"] >= 1
    assert "would remove" in report.summary() and report.summary().endswith("dry run, nothing removed")
    assert db_row(engine, "clusters", doomed) is not None
    purger.run()
    assert db_row(engine, "clusters", doomed) is None


def test_purge_skips_a_tombstone_another_transaction_holds_and_takes_it_next_time(
    client, old_times, engine, purger
):
    held, free = old_cluster(old_times), old_cluster(old_times)
    deleted(client, f"/v1/clusters/{held}")
    deleted(client, f"/v1/clusters/{free}")
    finished = threading.Event()
    with engine.connect() as holder:
        holder.execute(text("SELECT 1 FROM clusters WHERE id = :id FOR UPDATE"), {"id": held})
        purging = threading.Thread(target=lambda: (purger.run(), finished.set()), daemon=True)
        purging.start()
        purging.join(timeout=60)
        assert finished.is_set(), "purge waited on a row another transaction holds"
        assert db_row(engine, "clusters", free) is None
        assert db_row(engine, "clusters", held) is not None
        holder.rollback()
    purger.run()
    assert db_row(engine, "clusters", held) is None


def test_a_delete_of_an_old_object_in_flight_during_a_purge_is_purged_by_the_next_pass(
    client, old_times, engine, purger
):
    """Purge racing the delete of an old object and the create of a fresh one, each
    held uncommitted across a whole pass: the pass waits on neither and touches neither."""
    old = old_cluster(old_times)
    fresh = internal_cluster_body(id=str(uuid7_ago(0)))
    with engine.connect() as writes:
        writes.execute(text("UPDATE clusters SET deleted_at = now() WHERE id = :id"), {"id": old})
        writes.execute(
            text("INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb) "
                 "VALUES (:id, :team_id, :name, :region, :postgres_version, :plan, :storage_gb)"),
            fresh,
        )
        purger.run()  # in this thread: it would hang here if it waited on either row
        writes.commit()
    assert db_row(engine, "clusters", old)["deleted_at"] is not None  # its delete landed after the pass began
    assert db_row(engine, "clusters", fresh["id"])["deleted_at"] is None

    purger.run()

    assert db_row(engine, "clusters", old) is None
    assert db_row(engine, "clusters", fresh["id"])["deleted_at"] is None
    assert client.post("/v1/clusters", json=internal_cluster_body(id=str(old))).get_json()["code"] == "id_expired"


def test_a_create_of_an_id_being_purged_does_not_wait_and_never_brings_it_back(client, old_times, engine, database):
    """The purge's DELETE is held uncommitted while the ID's late create comes: the create
    answers at once (gone: it still sees the tombstone), and after the commit, id_expired."""
    doomed = old_cluster(old_times)
    deleted(client, f"/v1/clusters/{doomed}")
    body = internal_cluster_body(id=str(doomed))
    cutoff = Horizon().purge_cutoff(database_now(engine))
    with database.begin() as purge:
        assert remove(db_session=purge, resource=CLUSTER, ids=[uuid.UUID(doomed)], cutoff=cutoff,
                      purgeable=[], dry_run=False, child_purgeable={}) == 1
        during = client.post("/v1/clusters", json=body)  # the test would hang here if it waited
        assert (during.status_code, during.get_json()["code"]) == (410, "gone")
    after = client.post("/v1/clusters", json=body)
    assert (after.status_code, after.get_json()["code"]) == (410, "id_expired")
    assert db_row(engine, "clusters", doomed) is None


def database_now(engine):
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


@pytest.mark.parametrize("table", ["clusters", "firewall_rules"])
def test_purge_reads_deleted_rows_through_their_index_never_the_table(engine, table):
    resource = RESOURCES.by_table(table)
    now = database_now(engine)
    assert_reads_through(engine, f"ix_{table}_deleted", lambda conn: deleted_window(
        db_session=conn, resource=resource, until=now, after=(now, uuid.uuid4()), limit=10))


# -- the command -----------------------------------------------------------------------------


def purge_command(cluster_db_url, *args, env=None):
    return subprocess.run(
        [console_script("cluster-svc"), "purge", *args],
        env={**os.environ, "CLUSTER_DATABASE_URL": cluster_db_url, **(env or {})},
        capture_output=True, text=True, timeout=120,
    )


def test_the_command_prints_one_summary_line_and_exits_0(client, old_times, engine, cluster_db_url):
    doomed = old_cluster(old_times)
    deleted(client, f"/v1/clusters/{doomed}")

    dry = purge_command(cluster_db_url, "--dry-run")
    assert dry.returncode == 0 and db_row(engine, "clusters", doomed) is not None
    assert dry.stdout.startswith("purge: would remove ") and dry.stdout.count("\n") == 1
    result = purge_command(cluster_db_url)

    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith("purge: removed ") and " clusters, " in line and " firewall_rules" in line
    assert db_row(engine, "clusters", doomed) is None


def test_the_command_reads_the_horizon_from_the_environment(client, engine, cluster_db_url):
    recent = made(client, "/v1/clusters", internal_cluster_body(id=str(uuid7_ago(3 * DAY))))
    deleted(client, f"/v1/clusters/{recent}")
    assert purge_command(cluster_db_url).returncode == 0
    assert db_row(engine, "clusters", recent) is not None  # 30 days by default

    assert purge_command(cluster_db_url, env={"ID_HORIZON_SECONDS": str(2 * DAY)}).returncode == 0
    assert db_row(engine, "clusters", recent) is None


def test_a_malformed_horizon_stops_the_command_with_one_line(cluster_db_url):
    result = purge_command(cluster_db_url, env={"ID_HORIZON_SECONDS": "thirty days"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "ID_HORIZON_SECONDS" in result.stderr


def test_every_runs_a_pass_per_interval_until_sigterm_then_exits_0(cluster_db_url, tmp_path):
    log = tmp_path / "purge.out"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [console_script("cluster-svc"), "purge", "--every", "0.1"],
            env={**os.environ, "CLUSTER_DATABASE_URL": cluster_db_url}, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        from tooling.testing import wait_for

        wait_for(lambda: log.read_text().count("purge: ") >= 3, timeout=60, what="three passes")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
