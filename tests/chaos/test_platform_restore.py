"""Scenario 10: platform's own database restored from an older dump, cluster_svc keeping its newer data.

An estate of clusters and firewall rules is synced; then, while users create,
change and delete objects (the reconciler running beside the inline pushes),
platform's database is dumped with pg_dump. The writes go on and are all
synced. Then platform_svc is stopped, its database restored from the old dump
(it forgets every later create, update and delete) and started again, while
cluster_svc keeps everything. The platform owns the fields, so:

- every object the platform knows ends equal on both sides, field by field:
  those changed after the dump are ``ahead`` downstream, and the platform
  moves past cluster_svc's generation and pushes its own fields there (the
  changes made after the dump are lost, as decision 0010 says);
- objects created after the dump exist only downstream: reported as
  ``orphan``, never changed;
- objects deleted after the dump are tombstones downstream: the platform
  cannot undo a delete, so they are ``deleted_downstream`` and failed, for a
  person to decide;
- while all that is repaired, users keep PATCHing, and no PATCH is ever
  answered ``synced`` while cluster_svc holds other fields than it set.
"""
from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from functools import partial

import pytest
from sqlalchemy import text

from shared.contract import PLANS
from shared.counters import REPAIR_FINDINGS
from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import (
    REPAIR_INTERVAL,
    Burst,
    cluster_body,
    dump_partway,
    in_turn,
    rule_body,
    rules_path,
    run_all,
    running_pair,
)
from tooling import embedded_pg
from tooling.compare import compared
from tooling.pair import PublicApi, expect
from tooling.testing import wait_for


@pytest.fixture(scope="module")
def pair(pg_server_url, platform_pg, tmp_path_factory, request):
    """Both services, platform_svc on a PostgreSQL of its own."""
    platform_server = embedded_pg.admin_url(platform_pg)
    yield from running_pair(request, tmp_path_factory, platform_server=platform_server, cluster_server=pg_server_url)


def rule_path(rule: dict) -> str:
    return f"/v1/clusters/{rule['cluster_id']}/firewall-rules/{rule['id']}"


def rows(engine, table: str) -> dict[str, dict]:
    with engine.connect() as conn:
        return {str(row["id"]): dict(row) for row in conn.execute(text(f"SELECT * FROM {table}")).mappings()}


class Sides:
    """Both databases read once: each object's row on either side, by table and ID."""

    def __init__(self, pair) -> None:
        self.kinds = compared()
        self.ours = {kind.table: rows(pair.platform_engine, kind.table) for kind in self.kinds}
        self.theirs = {kind.table: rows(pair.cluster_engine, kind.table) for kind in self.kinds}

    def differing(self) -> dict[str, str]:
        """Every object the platform knows that cluster_svc holds otherwise, with why (``table id`` -> why)."""
        found = {}
        for kind in self.kinds:
            for object_id, mine in self.ours[kind.table].items():
                there = self.theirs[kind.table].get(object_id)
                key = f"{kind.table} {object_id}"
                if there is None:
                    found[key] = "missing"
                elif (mine["deleted_at"] is None) != (there["deleted_at"] is None):
                    found[key] = "deleted downstream" if mine["deleted_at"] is None else "alive downstream"
                elif mine["deleted_at"] is None:
                    other = [ours for ours, theirs in kind.fields if str(mine[ours]) != str(there[theirs])]
                    if other:
                        found[key] = "other " + ", ".join(other)
                    elif mine["sync_state"] != "synced" or mine["synced_generation"] != mine["generation"]:
                        found[key] = f"not synced ({mine['sync_state']})"
                elif mine["sync_state"] != "synced":
                    found[key] = f"not synced ({mine['sync_state']})"
        return found

    def unknown(self) -> set[str]:
        """Live objects downstream that the platform does not know (``table id``)."""
        return {
            f"{kind.table} {object_id}"
            for kind in self.kinds
            for object_id, there in self.theirs[kind.table].items()
            if there["deleted_at"] is None and object_id not in self.ours[kind.table]
        }

    def deleted_downstream(self) -> set[str]:
        """Objects alive on the platform, tombstones downstream (deleted after the dump)."""
        return {
            f"{kind.table} {object_id}"
            for kind in self.kinds
            for object_id, mine in self.ours[kind.table].items()
            if mine["deleted_at"] is None
            and (there := self.theirs[kind.table].get(object_id)) is not None
            and there["deleted_at"] is not None
        }


class Patches:
    """PATCHes of objects each owned by one user (one after the other), every answer checked at once:
    an answer ``synced`` must find cluster_svc holding the fields it set."""

    def __init__(self, pair, api: PublicApi) -> None:
        self.pair = pair
        self.api = api
        self.lock = threading.Lock()
        self.answers: Counter[str] = Counter()
        self.lies: list[str] = []  # answered synced while cluster_svc held other fields

    def run(self, path: str, table: str, bodies: list[dict]) -> None:
        for body in bodies:
            answer = expect(self.api.call("PATCH", path, json=body), 200)
            with self.lock:
                self.answers[answer["sync_state"]] += 1
            if answer["sync_state"] != "synced":
                continue
            there = self.pair.cluster_row(table, answer["id"])
            held = {name: there[name] for name in body}
            if held != body or there["generation"] < answer["generation"]:
                with self.lock:
                    self.lies.append(f"{table} {answer['id']}: answered synced at generation {answer['generation']}"
                                     f" with {body}; cluster_svc holds {held} at {there['generation']}")


def test_a_restore_of_platforms_database_from_an_older_dump_is_repaired_from_the_platforms_side(
    pair, scale, rng, figures
):
    api = pair.account("platform-restore")
    n = scale.objects
    clusters = run_all([partial(api.create, "/v1/clusters", cluster_body(rng, i)) for i in range(n)], scale.threads)
    rules = run_all([partial(api.create, rules_path(c["id"]), rule_body(rng)) for c in clusters[::3]], scale.threads)
    pair.converge()
    assert pair.compare().exact

    mark = pair.mark()
    doomed = rng.sample(clusters, n // 10)
    doomed_ids = {c["id"] for c in doomed}
    survivors = [c for c in clusters if c["id"] not in doomed_ids]
    path = "/v1/clusters"
    creates = [[("POST", path, cluster_body(rng, n + i), (201,))] for i in range(n // 4)]
    creates += [
        [("POST", path, cluster_body(rng, 2 * n + i), (201,)),
         ("POST", path + "/{id}/firewall-rules", rule_body(rng), (201,))]
        for i in range(n // 6)
    ]
    changes = [
        [("PATCH", f"{path}/{c['id']}", {"plan": rng.choice(PLANS), "name": f"late-{rng.randrange(10**6)}"}, (200,))]
        * rng.randint(1, 2)
        for c in rng.sample(survivors, len(survivors) // 2)
    ]
    changes += [[("PATCH", rule_path(r), {"description": f"late {rng.randrange(10**6)}"}, (200,))]
                for r in rules[::2] if r["cluster_id"] not in doomed_ids]
    deletes = [[("DELETE", f"{path}/{c['id']}", None, (202, 204))] for c in doomed]
    calls = [partial(in_turn, api, steps) for steps in creates + changes + deletes]
    rng.shuffle(calls)
    dump = dump_partway(pair, calls, scale.threads, database_url=pair.platform_db_url, after=len(calls) // 4)

    pair.platform_svc.stop()
    embedded_pg.restore(pair.platform_db_url, dump)
    pair.restart_platform_svc()
    pair.events["restore platform's database from an older dump"] += 1
    restored_at = time.monotonic()
    before = Sides(pair)
    differing = before.differing()
    orphans = before.unknown()
    gone = before.deleted_downstream()
    assert differing and orphans, "the dump was no older than the database"

    # Users go on PATCHing what the platform knows (alive on both sides), one user per object.
    known = [c for c in before.ours["clusters"].values() if f"clusters {c['id']}" not in gone and not c["deleted_at"]]
    owned = rng.sample(known, min(len(known), 2 * scale.threads))
    patches = Patches(pair, api)
    mine = random.Random(rng.randrange(2**31))
    jobs = [
        partial(patches.run, f"{path}/{c['id']}", "clusters",
                [{"storage_gb": mine.randint(10, 4096), "plan": mine.choice(PLANS)} for _ in range(3)])
        for c in owned
    ]
    with pair.reconciler("--concurrency", "4", "--repair-interval", REPAIR_INTERVAL) as reconciler:
        patching = Burst(jobs, scale.threads).start()
        assert not [r for r in patching.results() if isinstance(r, BaseException)]
        left: dict = {}

        def level():
            nonlocal left
            after = Sides(pair)
            left = {key: why for key, why in after.differing().items() if key not in gone}
            reported = reconciler.output()
            told = {f"{t}s {i}" for t, i in re.findall(r"repair: orphan (cluster|firewall_rule) ([0-9a-f-]{36})", reported)}
            return (after, reported, told) if not left and orphans <= told else None

        after, reported, told = wait_for(level, timeout=180, poll=0.5, what=lambda: f"not level: {sorted(left.items())[:20]}")
        seconds = time.monotonic() - restored_at
    repaired = Counter(re.findall(r"repair: (\w+) (?:cluster|firewall_rule) ", reported))
    pushed_ahead = reported.count("cluster_svc is ahead")
    pushed_ahead += (pair.workdir / "platform_svc.log").read_text().count("cluster_svc is ahead")

    comparison = pair.compare()
    figures.append(
        scenario_figures(
            pair,
            "10 restore of platform's db",
            mark,
            comparison,
            expected=comparison.live_and_deleted(comparison.platform),
            notes=f"dump taken after {len(calls) // 4} of {len(calls)} writes; {len(differing)} objects the platform"
            f" knows differed after the restore ({', '.join(f'{n} {why}' for why, n in Counter(w.split(' (')[0] for w in differing.values()).most_common())});"
            f" repair found: {', '.join(f'{repaired[f]} {f}' for f in REPAIR_FINDINGS)}; pushes answered ahead: {pushed_ahead};"
            f" {len(orphans)} created after the dump reported as orphans; {len(gone)} deleted after it failed"
            f" (deleted_downstream); {len(owned)} users' PATCHes meanwhile: {dict(patches.answers)}, {len(patches.lies)}"
            f" synced while cluster_svc held other fields; level {seconds:.1f} s after the restore",
        )
    )
    assert patches.lies == []
    assert sum(patches.answers.values()) == 3 * len(owned)
    assert not left  # every object the platform knows is equal on both sides (but those deleted after the dump)
    assert told <= orphans | after.unknown() and orphans <= told  # created after the dump: reported, only that
    for key in orphans:
        table, object_id = key.split()
        assert after.theirs[table][object_id]["deleted_at"] is None  # and left alone
    for key in gone:
        table, object_id = key.split()
        row = after.ours[table][object_id]
        assert row["sync_state"] == "failed" and "deleted in cluster_svc" in row["sync_error"], row
    assert repaired["ahead"] + pushed_ahead > 0 and repaired["orphan"] >= len(orphans), repaired
    assert repaired["missing"] == repaired["behind"] == repaired["undeleted"] == 0, repaired
    audit = read_audit(pair)
    assert audit.regressions == audit.resurrections == audit.duplicates == audit.hard_deletes == 0, audit
    assert pair.public_5xx(mark) == 0
