"""The client's resources by name (idempotent_pair_client.resources, generated from the
declarations by tooling/clientgen.py): up to date, what they send, and what a caller's
``mypy --strict`` sees. Their agreement with the served document is
tests/platform_svc/test_client_resources.py."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from idempotent_pair_client import ClusterClient, NotFound, PlatformClient
from idempotent_pair_client.aio import AsyncPlatformClient
from idempotent_pair_client.resources import Cluster, FirewallRule, InternalCluster

from tooling import clientgen
from tooling.scripted import reply

CALLERS = Path(__file__).with_name("callers")
CLUSTER = {"id": "0193a1b2-7c00-7000-8000-000000000001", "name": "main-db", "region": "eu-west-1",
           "postgres_version": 16, "plan": "standard-2", "storage_gb": 100, "generation": 1, "sync_state": "synced",
           "sync_error": None, "synced_at": None, "created_at": "t", "updated_at": "t", "deleted_at": None,
           "added_by_a_newer_service": 1}
RULE = {"id": "0193a1b2-7c00-7000-8000-000000000002", "cluster_id": CLUSTER["id"], "cidr": "10.0.0.0/8",
        "description": ""}


def test_the_generated_resources_are_what_the_declarations_make_now():
    assert clientgen.main(["--check"]) == 0, "run: python -m tooling.clientgen"


@pytest.fixture
def api(server):
    with PlatformClient(server.url, api_key="k", retry_for=2.0, timeout=2.0) as client:
        yield client


def test_a_collection_by_name_sends_what_the_path_based_call_would_and_answers_a_typed_record(api, server):
    server.script(reply(201, CLUSTER), reply(200, {"items": [RULE], "next_after": None}), reply(204))

    made = api.clusters.create({"name": "main-db", "region": "eu-west-1", "postgres_version": 16,
                                "plan": "standard-2", "storage_gb": 100}, idempotency_key="key-1")
    rules = list(api.firewall_rules(made.id).list(limit=10))
    deleted = api.firewall_rules(made.id).delete(RULE["id"])

    assert isinstance(made, Cluster) and (made.name, made.storage_gb, made.meta.status) == ("main-db", 100, 201)
    assert made.extra == {"added_by_a_newer_service": 1}  # kept, never refused
    assert rules == [FirewallRule.of(RULE)] and rules[0].cidr == "10.0.0.0/8"
    assert deleted.outcome.value == "deleted"
    create, listing, delete = server.requests
    assert (create.method, create.path, create.headers["Idempotency-Key"]) == ("POST", "/v1/clusters", "key-1")
    assert (listing.method, listing.path) == ("GET", f"/v1/clusters/{CLUSTER['id']}/firewall-rules?limit=10")
    assert (delete.method, delete.path) == ("DELETE", f"/v1/clusters/{CLUSTER['id']}/firewall-rules/{RULE['id']}")


def test_the_internal_client_has_its_collections_by_name_with_the_callers_ids(server):
    internal_copy = {k: v for k, v in CLUSTER.items() if k not in ("sync_state", "sync_error", "synced_at")}
    server.script(reply(201, {**internal_copy, "team_id": "t"}), reply(200, {**internal_copy, "generation": 2}),
                  reply(404, {"code": "not_found"}))
    with ClusterClient(server.url, token="t", retry_for=2.0, timeout=2.0) as internal:
        made = internal.clusters.create({"id": CLUSTER["id"], "team_id": "t", "name": "main-db", "region": "eu-west-1",
                                         "postgres_version": 16, "plan": "standard-2", "storage_gb": 100})
        moved = internal.clusters.update(made.id, {"name": "main-db", "plan": "memory-8", "storage_gb": 100},
                                         generation=2)
        with pytest.raises(NotFound):
            internal.firewall_rules(made.id).delete(RULE["id"], unknown="refuse")

    assert isinstance(made, InternalCluster) and (made.team_id, made.meta.status) == ("t", 201)
    assert moved.generation == 2 and server.requests[1].json["generation"] == 2
    assert [r.method for r in server.requests] == ["POST", "PUT", "GET"]  # refused unknown: no DELETE sent


def test_the_async_twin_has_the_same_collections_by_name(server):
    server.script(reply(201, CLUSTER), reply(200, {"items": [RULE], "next_after": None}))

    async def calls():
        async with AsyncPlatformClient(server.url, api_key="k", retry_for=2.0, timeout=2.0) as api:
            made = await api.clusters.create({"name": "main-db", "region": "eu-west-1", "postgres_version": 16,
                                              "plan": "standard-2", "storage_gb": 100})
            return made, [rule async for rule in api.firewall_rules(made.id).list()]

    made, rules = asyncio.run(calls())

    assert isinstance(made, Cluster) and made.meta.status == 201 and rules == [FirewallRule.of(RULE)]
    assert [(r.method, r.path) for r in server.requests] == [
        ("POST", "/v1/clusters"), ("GET", f"/v1/clusters/{CLUSTER['id']}/firewall-rules")]


def mypy(*scripts: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, scripts)],
                          capture_output=True, text=True, timeout=300)


def test_a_callers_mypy_strict_accepts_every_accessor_and_refuses_a_misspelt_field():
    # One run for both callers (mypy's start, typeshed included, is most of its time): every error
    # must be the misspelt caller's.
    checked = mypy(CALLERS / "every_accessor.py", CALLERS / "misspelt.py")
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]

    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert errors and all(Path(line.split(":")[0]).name == "misspelt.py" for line in errors), checked.stdout
    assert 'Extra key "storage_gbs" for TypedDict "ClusterUpdate"' in checked.stdout  # a body's key
    assert '"Cluster" has no attribute "storage_gb_total"' in checked.stdout  # a record's field
    assert 'Missing key "storage_gb" for TypedDict "InternalClusterUpdate"' in checked.stdout  # a PUT's whole body
