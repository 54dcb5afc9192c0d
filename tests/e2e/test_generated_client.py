"""Clients generated from the served OpenAPI documents, by a tool nobody here wrote.

openapi-python-client generates a client for each service from its
``/openapi.json`` (into a temporary folder, at test time); the public flow and
the internal flow are then driven through those clients only, against real
processes. A PATCH made with a generated model must leave the fields it did
not set unchanged.
"""
from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import uuid
from http import HTTPStatus
from pathlib import Path

import pytest
import requests

from tooling.pair import TOKEN

GENERATOR = Path(sys.executable).with_name("openapi-python-client")


def generate(url: str, folder: Path, package: str):
    """Generate a client package from the document served at ``url`` and import it."""
    spec = folder / f"{package}.json"
    spec.write_bytes(requests.get(f"{url}/openapi.json", timeout=30).content)
    config = folder / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run afterwards
    done = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(spec), "--output-path", str(folder / package),
         "--meta", "none", "--config", str(config)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    return importlib.import_module(package)


@pytest.fixture(scope="module")
def clients(module_pair, tmp_path_factory):
    folder = tmp_path_factory.mktemp("generated")
    sys.path.insert(0, str(folder))
    try:
        pair = module_pair
        public = generate(pair.platform_svc.url, folder, "platform_api_client")
        internal = generate(pair.cluster_svc.url, folder, "cluster_api_client")
        api_key = pair.account("generated-client", cli=False).api_key
        with public.AuthenticatedClient(base_url=pair.platform_svc.url, token=api_key) as p, \
                internal.AuthenticatedClient(base_url=pair.cluster_svc.url, token=TOKEN) as c:
            yield p, c
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n.split(".")[0] in ("platform_api_client", "cluster_api_client")]:
            del sys.modules[name]
        shutil.rmtree(folder, ignore_errors=True)


def api(package: str, module: str):
    tag = "public" if package == "platform_api_client" else "clusters"
    return importlib.import_module(f"{package}.api.{tag}.{module}")


def model(package: str, name: str):
    return getattr(importlib.import_module(f"{package}.models"), name)


def no_content(answer) -> bool:
    return answer.content == b"" and "content-type" not in answer.headers


CLUSTER = {"name": "gen-db", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}


def test_the_public_flow_through_a_generated_client(clients):
    client, _ = clients
    p = "platform_api_client"
    ClusterCreate, ClusterPatch = model(p, "ClusterCreate"), model(p, "ClusterPatch")
    ClusterPatchPlan, Problem = model(p, "ClusterPatchPlan"), model(p, "Problem")
    create = api(p, "post_v1_clusters")
    key = f"gen-{uuid.uuid4()}"

    created = create.sync_detailed(client=client, body=ClusterCreate.from_dict(CLUSTER), idempotency_key=key)
    replayed = create.sync_detailed(client=client, body=ClusterCreate.from_dict(CLUSTER), idempotency_key=key)
    reused = create.sync_detailed(
        client=client, body=ClusterCreate.from_dict({**CLUSTER, "storage_gb": 200}), idempotency_key=key
    )

    assert created.status_code == HTTPStatus.CREATED
    cluster = created.parsed
    assert (cluster.sync_state, cluster.generation, created.headers["location"]) == (
        "synced", 1, f"/v1/clusters/{cluster.id}"
    )
    assert replayed.status_code == HTTPStatus.OK and replayed.headers["idempotent-replayed"] == "true"
    assert replayed.parsed.id == cluster.id
    assert reused.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
    assert isinstance(reused.parsed, Problem) and reused.parsed.code == "idempotency_key_reused"

    # A PATCH with only the plan set changes only the plan; then a newer one.
    patch = api(p, "patch_v1_clusters_cluster_id")
    first = patch.sync_detailed(cluster.id, client=client, body=ClusterPatch(plan=ClusterPatchPlan("memory-8")))
    second = patch.sync_detailed(cluster.id, client=client, body=ClusterPatch.from_dict({"storage_gb": 200}))
    assert first.status_code == second.status_code == HTTPStatus.OK
    now = second.parsed
    assert (now.name, now.plan, now.storage_gb, now.generation, now.sync_state) == (
        "gen-db", "memory-8", 200, 3, "synced"
    )
    nothing = patch.sync_detailed(cluster.id, client=client, body=ClusterPatch())
    assert nothing.status_code == HTTPStatus.UNPROCESSABLE_ENTITY

    # The rule whose description a generated PATCH once wiped.
    rules = api(p, "post_v1_clusters_cluster_id_firewall_rules")
    rule = rules.sync_detailed(
        cluster.id, client=client,
        body=model(p, "FirewallRuleCreate").from_dict({"cidr": "10.0.0.0/8", "description": "keep me"}),
    ).parsed
    unset = api(p, "patch_v1_clusters_cluster_id_firewall_rules_rule_id").sync_detailed(
        cluster.id, rule.id, client=client, body=model(p, "FirewallRulePatch")()
    )
    got = api(p, "get_v1_clusters_cluster_id_firewall_rules_rule_id").sync_detailed(cluster.id, rule.id, client=client)
    assert unset.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
    assert (got.parsed.description, got.parsed.generation) == ("keep me", 1)

    delete = api(p, "delete_v1_clusters_cluster_id")
    deleted = delete.sync_detailed(cluster.id, client=client)
    again = delete.sync_detailed(cluster.id, client=client)
    assert deleted.status_code == HTTPStatus.NO_CONTENT and no_content(deleted)
    assert again.status_code == HTTPStatus.GONE and again.parsed.code == "gone"
    gone = create.sync_detailed(client=client, body=ClusterCreate.from_dict(CLUSTER), idempotency_key=key)
    assert gone.status_code == HTTPStatus.GONE


def test_the_internal_flow_through_a_generated_client(clients):
    _, client = clients
    c = "cluster_api_client"
    ClusterCreate, ClusterUpdate = model(c, "ClusterCreate"), model(c, "ClusterUpdate")
    create, put = api(c, "post_v1_clusters"), api(c, "put_v1_clusters_cluster_id")
    body = {**CLUSTER, "id": str(uuid.uuid4()), "team_id": str(uuid.uuid4())}

    created = create.sync_detailed(client=client, body=ClusterCreate.from_dict(body))
    replayed = create.sync_detailed(client=client, body=ClusterCreate.from_dict(body))
    conflict = create.sync_detailed(client=client, body=ClusterCreate.from_dict({**body, "region": "us-east-1"}))

    assert created.status_code == HTTPStatus.CREATED and created.headers["location"].endswith(body["id"])
    assert replayed.status_code == HTTPStatus.OK and replayed.headers["idempotent-replayed"] == "true"
    assert conflict.status_code == HTTPStatus.CONFLICT and conflict.parsed.code == "id_conflict"

    cluster_id = created.parsed.id
    update = {"name": "renamed", "plan": "memory-8", "storage_gb": 200}
    newer = put.sync_detailed(cluster_id, client=client, body=ClusterUpdate.from_dict({**update, "generation": 3}))
    stale = put.sync_detailed(
        cluster_id, client=client, body=ClusterUpdate.from_dict({**update, "name": "stale", "generation": 2})
    )
    assert newer.status_code == stale.status_code == HTTPStatus.OK
    assert (stale.parsed.name, stale.parsed.generation) == ("renamed", 3)  # the stale one changed nothing

    rule_body = {"id": str(uuid.uuid4()), "cidr": "2001:db8::/32", "description": "keep me"}
    rule = api(c, "post_v1_clusters_cluster_id_firewall_rules").sync_detailed(
        cluster_id, client=client, body=model(c, "FirewallRuleCreate").from_dict(rule_body)
    )
    assert rule.status_code == HTTPStatus.CREATED and rule.parsed.cidr == "2001:db8::/32"

    delete = api(c, "delete_v1_clusters_cluster_id")
    deleted = delete.sync_detailed(cluster_id, client=client)
    again = delete.sync_detailed(cluster_id, client=client)
    assert deleted.status_code == HTTPStatus.NO_CONTENT and no_content(deleted)
    assert again.status_code == HTTPStatus.GONE and again.parsed.code == "gone"
