"""A reconciler batch larger than cluster_svc's body limit (issue 18, item 4):
400 pending firewall rules whose 255-character descriptions are emoji, drained
by ``reconcile --once --batch 1000``, some of them already held downstream.
Every one ends synced; none fails on a 413."""
from __future__ import annotations

import uuid6
from sqlalchemy import text

from shared.api import MAX_BODY_BYTES
from shared.client import encode
from tests.helpers import cluster_body

RULES = 400
HELD_ALREADY = 18  # created downstream before the reconciler runs: answered 200 in the batch


def test_a_batch_over_the_body_limit_is_cut_and_every_rule_ends_synced(fresh_pair):
    pair = fresh_pair
    cluster = pair.current.create("/v1/clusters", cluster_body())
    assert cluster["sync_state"] == "synced"
    description = "\N{GRINNING FACE}" * 255
    rules = [
        {"id": str(uuid6.uuid7()), "cidr": f"10.{n // 256}.{n % 256}.0/24", "description": description}
        for n in range(RULES)
    ]
    assert len(encode({"items": rules})) > MAX_BODY_BYTES  # one call could not hold them
    with pair.platform_engine.begin() as conn:
        conn.execute(
            text("INSERT INTO firewall_rules (id, account_id, cluster_id, cidr, description)"
                 " VALUES (:id, :account, :cluster, :cidr, :description)"),
            [{**rule, "account": pair.account_id, "cluster": cluster["id"]} for rule in rules],
        )
    for rule in rules[:HELD_ALREADY]:
        response = pair.internal("POST", f"/v1/clusters/{cluster['id']}/firewall-rules", json=rule)
        assert response.status_code == 201, response.text

    [run] = pair.reconcile(batch=1000)

    assert run.returncode == 0, run.output
    states = {str(row["id"]): row["sync_state"] for row in pair.platform_rows("firewall_rules").values()}
    assert states == {rule["id"]: "synced" for rule in rules}, run.output[-3000:]
    pair.assert_downstream_matches()
    assert "413" not in run.output
