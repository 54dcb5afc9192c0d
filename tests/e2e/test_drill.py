"""``platform-svc drill id-conflict`` makes a real id_conflict on a running pair, so the runbook can
be practised: the platform's row failed with that reason, another team's object under its ID in
cluster_svc, and the way out (``abandon``) closing it as in the incident itself."""
from __future__ import annotations

import re

CLUSTERS = "/v1/clusters"


def test_the_drill_makes_an_id_conflict_the_runbook_then_closes(pair):
    made = pair.cli("drill", "id-conflict")

    assert made.returncode == 0, made.stderr
    object_id, account_id = re.match(r"([0-9a-f-]{36}) \(account 'drill', ([0-9a-f-]{36})\)", made.stdout).groups()
    assert "409 id_conflict" in made.stdout and f"/console/objects/clusters/{object_id}" in made.stdout
    row = pair.platform_row("clusters", object_id)
    assert row["sync_state"] == "failed" and "id_conflict" in row["sync_error"]
    theirs = pair.internal("GET", f"{CLUSTERS}/{object_id}").json()
    assert theirs["team_id"] != account_id and theirs["deleted_at"] is None  # another team's, alive in cluster_svc
    assert object_id in pair.cli("sync-status", "--state", "failed", "--limit", "1000").stdout

    closed = pair.cli("abandon", "clusters", object_id)

    assert closed.returncode == 0, closed.stderr
    assert pair.platform_row("clusters", object_id)["abandoned_at"] is not None
    assert pair.internal("GET", f"{CLUSTERS}/{object_id}").json() == theirs  # theirs untouched
    assert pair.cli("drill", "id-conflict").returncode == 0  # again, as often as practice needs
