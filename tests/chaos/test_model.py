"""A model of every action, run against the real pair: ``synced`` is a proof whatever anyone did
(docs/design.md, property 12; issue 29, item 4).

hypothesis's stateful testing draws programs of the actions callers, faults and operators take,
runs each on one real pair (tests/chaos/model_world.py) and, after every step, checks what the
pair promises:

1. **synced is held as the platform says.** A row the platform calls ``synced`` is held by
   cluster_svc alive (or, for a deleted row, not alive: a tombstone, under a deleted cluster,
   purged), at the row's generation, with the fields the platform owns and its ancestry (the
   cluster's team, the rule's cluster); and it carries no ``sync_error``. A hand edit of
   cluster_svc's database makes its objects differ behind the platform's back, so they are
   exempt until the platform records something new about them (then it must be true again) or
   a ``repair`` pass has run (which must find every such difference).
2. **No object of another caller is changed** (another team's, or an orphan of this one).
3. **No ID comes back**: nothing seen deleted in cluster_svc is alive there again; nothing
   deleted on the platform is alive again, nor a purged row back.
4. **No acknowledged write is lost**: every create the public API answered is on the platform,
   with its fields and the PATCHes it acknowledged, until a purge removes it (deleted, its
   delete confirmed, its ID past the horizon).

Each answer of the public API is checked too (201, 200 on a replay, 410 once deleted, 422 for a
key reused with another body, never a 5xx).

The actions: public creates (with and without Idempotency-Key), replays, PATCHes, deletes;
internal creates with the caller's IDs (another team's, reusing a platform ID; an orphan of the
account's team); hand edits of cluster_svc's database (a copy deleted, a mutable or an immutable
field edited with or without its generation, a rule moved under another cluster, a row removed,
an older copy put back); cluster_svc frozen (SIGSTOP) while public writes come, then thawed;
``reconcile --once``, ``repair``, ``sync-status --retry-failed`` (whole or narrowed) with the
reconcile that follows, decision 0014's way out, and ``purge`` on both sides with a horizon of a
few seconds.

One pair serves every example (a new account and new IDs each); the operator's commands run as
processes forked from one that has them imported (tooling/commands.py). Seeded from CHAOS_SEED
like the chaos suite; CHAOS_SCALE=full (``make chaos``) runs more and longer programs.
"""
from __future__ import annotations

import ipaddress
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, note, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

from shared.contract import CLUSTER, FIREWALL_RULE, PLANS, REGIONS
from tests.chaos.harness import scale_from_env, seed_for
from tests.chaos.model_world import CLUSTERS, RULES, Key, World
from tooling.commands import Commands
from tooling.pair import start_pair
from tooling.testing import uuid7_ago

# The way out of decision 0014 and narrowed retries (sync-status --retry-failed --id/--reason/--resource).
RETRY_NARROWING = True


@dataclass(frozen=True)
class Size:
    seconds: float  # programs are run while another one fits in this much time (one batch at least)
    steps: int  # actions per program, at most
    horizon: int  # ID_HORIZON_SECONDS of the pair: purge has something to remove within a program


FIRST_BATCH = 3  # programs in the first batch, which sets the pace
MAX_OUTAGES = 1  # per program: the costliest action (see ``outage``)
SIZES = {"ci": Size(seconds=20, steps=25, horizon=6), "full": Size(seconds=600, steps=50, horizon=10)}
SIZE = SIZES[scale_from_env().name]

DECLARED = {CLUSTERS: CLUSTER, RULES: FIREWALL_RULE}
OWNED = {CLUSTERS: ("team_id",), RULES: ("cluster_id",)}  # the ancestry, on cluster_svc's side
FINGERPRINT = ("generation", "synced_generation", "deleted_at", "delete_synced_at", "sync_failed_at", "synced_at")

names = st.sampled_from(["main-db", "db-2", "x"])
cluster_bodies = st.fixed_dictionaries({
    "name": names,
    "region": st.sampled_from(REGIONS[:3]),
    "postgres_version": st.integers(15, 16),
    "plan": st.sampled_from(PLANS[:2]),
    "storage_gb": st.sampled_from([10, 100]),
})
rule_bodies = st.fixed_dictionaries({
    "cidr": st.sampled_from(["10.0.0.0/8", "192.168.1.0/24", "2001:db8::/32"]),
    "description": st.sampled_from(["", "office"]),
})
cluster_patches = st.fixed_dictionaries(
    {}, optional={"name": names, "plan": st.sampled_from(PLANS), "storage_gb": st.sampled_from([20, 200])}
).filter(bool)
rule_patches = st.fixed_dictionaries({"description": st.sampled_from(["vpn", "", "office"])})
FIELD_EDITS = ("edit_mutable", "edit_immutable")
ROW_EDITS = ("delete_copy", "move_child", "remove_row", "put_back_older")


@dataclass
class Made:
    """One object this program's account created through the public API."""

    name: str  # "cluster 1", "rule 2": how a printed program names it
    key: Key
    fields: dict[str, Any]  # as acknowledged: the create's body, then each PATCH answered 200
    parent: Key | None = None
    idempotency_key: str | None = None
    deleted: bool = False  # the public API acknowledged its delete (or its cluster's)

    @property
    def path(self) -> str:
        object_id = self.key[1]
        if self.parent is None:
            return f"/v1/clusters/{object_id}"
        return f"/v1/clusters/{self.parent[1]}/firewall-rules/{object_id}"


class PairModel(RuleBasedStateMachine):
    """One program: an account of its own, its objects, and what it expects of them."""

    world: World  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.api = self.world.account(f"model {uuid.uuid4()}")
        self.account_id = self.api.account_id
        self.other_team = str(uuid.uuid4())
        self.made: dict[str, Made] = {}  # by name
        self.keys: dict[str, str] = {}  # Idempotency-Key: the name of what it created
        self.bodies: dict[str, dict] = {}  # Idempotency-Key: the body it came with
        self.others: dict[Key, dict] = {}  # other callers' objects, as created in cluster_svc
        self.taints: dict[Key, tuple | None] = {}  # hand-edited: the platform's row as it was then
        self.dead: set[Key] = set()  # seen deleted in cluster_svc
        self.vanished: set[Key] = set()  # purged from the platform
        self.copies: dict[Key, dict[int, dict]] = {}  # cluster_svc's copies seen, by generation
        self.outages = 0
        self.platform: dict[Key, dict] = {}  # the rows as last read
        self.downstream: dict[Key, dict] = {}

    # -- what the program knows ------------------------------------------------------------------

    def by_key(self, key: Key) -> Made | None:
        return next((made for made in self.made.values() if made.key == key), None)

    def alive(self, made: Made) -> bool:
        return not made.deleted

    def names_of(self, *tables: str, where=lambda made: True) -> list[str]:
        return sorted(name for name, made in self.made.items() if made.key[0] in tables and where(made))

    def held_alive(self, made: Made) -> bool:
        """Whether cluster_svc holds ``made`` alive (not another caller's object under its ID)."""
        copy = self.downstream.get(made.key)
        return copy is not None and copy["deleted_at"] is None and made.key not in self.others

    def failed_clusters(self) -> list[str]:
        return self.names_of(CLUSTERS, where=lambda m: self.alive(m) and self.platform.get(m.key, {}).get(
            "sync_state") == "failed")

    # -- public writes ---------------------------------------------------------------------------

    def create_cluster(self, body: dict, keyed: bool) -> None:
        key = f"key-{len(self.keys) + 1}" if keyed else None
        headers = {"Idempotency-Key": key} if key else {}
        answer = self.api.call("POST", "/v1/clusters", json=body, headers=headers)
        assert answer.status_code == 201, answer.text
        self._made(answer.json(), CLUSTERS, body, None, key)

    def create_rule(self, cluster: str, body: dict) -> None:
        parent = self.made[cluster]
        answer = self.api.call("POST", f"/v1/clusters/{parent.key[1]}/firewall-rules", json=body)
        if not self.alive(parent):
            assert answer.status_code == 410, answer.text
            return
        assert answer.status_code == 201, answer.text
        self._made(answer.json(), RULES, body, parent.key, None)

    def _made(self, created: dict, table: str, body: dict, parent: Key | None, key: str | None) -> None:
        count = 1 + len(self.names_of(table))
        name = f"{'cluster' if table == CLUSTERS else 'rule'} {count}"
        self.made[name] = Made(name, (table, created["id"]), dict(body), parent, key)
        if key is not None:
            self.keys[key], self.bodies[key] = name, body
        assert created["sync_state"] in ("pending", "synced", "failed"), created

    def patch(self, name: str, changes: dict) -> None:
        made = self.made[name]
        answer = self.api.call("PATCH", made.path, json=changes)
        if not self.alive(made):
            assert answer.status_code == 410, answer.text
            return
        assert answer.status_code == 200, answer.text
        made.fields.update(changes)

    def delete(self, name: str) -> None:
        made = self.made[name]
        answer = self.api.call("DELETE", made.path)
        if not self.alive(made):
            assert answer.status_code == 410, answer.text
            return
        assert answer.status_code in (202, 204), answer.text
        self.delete_acknowledged(made)

    def delete_acknowledged(self, made: Made) -> None:
        """The object is deleted, its rules with it (the API's delete, or an abandon)."""
        made.deleted = True
        if made.key[0] == CLUSTERS:
            for rule_made in self.made.values():
                if rule_made.parent == made.key:
                    rule_made.deleted = True

    def public_write(self, data) -> None:
        """One public write drawn from what the program can do."""
        kinds = ["create cluster"]
        if self.names_of(CLUSTERS):
            kinds += ["create rule", "patch", "delete"]
        kind = pick(data, kinds, "write")
        if kind == "create cluster":
            self.create_cluster(data.draw(cluster_bodies, label="body"), data.draw(st.booleans(), label="keyed"))
        elif kind == "create rule":
            self.create_rule(pick(data, self.names_of(CLUSTERS), "cluster"), data.draw(rule_bodies, label="body"))
        else:
            name = pick(data, self.names_of(CLUSTERS, RULES), "object")
            if kind == "delete":
                self.delete(name)
            else:
                patches = cluster_patches if self.made[name].key[0] == CLUSTERS else rule_patches
                self.patch(name, data.draw(patches, label="changes"))

    # -- the rules: callers ----------------------------------------------------------------------

    @initialize(body=cluster_bodies, other=cluster_bodies, rule_body=rule_bodies)
    def start(self, body, other, rule_body):
        """Two clusters, a rule under the first, pushed as the public API pushes them."""
        self.create_cluster(body, keyed=True)
        self.create_cluster(other, keyed=False)
        self.create_rule("cluster 1", rule_body)

    @rule(body=cluster_bodies, keyed=st.booleans())
    def public_create(self, body, keyed):
        self.create_cluster(body, keyed)

    @precondition(lambda self: self.names_of(CLUSTERS))
    @rule(data=st.data())
    def public_create_rule(self, data):
        self.create_rule(pick(data, self.names_of(CLUSTERS), "cluster"), data.draw(rule_bodies, label="body"))

    @precondition(lambda self: self.names_of(CLUSTERS, RULES))
    @rule(data=st.data())
    def public_patch(self, data):
        name = pick(data, self.names_of(CLUSTERS, RULES), "object")
        patches = cluster_patches if self.made[name].key[0] == CLUSTERS else rule_patches
        self.patch(name, data.draw(patches, label="changes"))

    @precondition(lambda self: self.names_of(CLUSTERS, RULES))
    @rule(data=st.data())
    def public_delete(self, data):
        self.delete(pick(data, self.names_of(CLUSTERS, RULES), "object"))

    @rule()
    def public_reads(self):
        """A caller reads each of its objects: alive as acknowledged, or 410 once deleted (or purged).

        (The cheapest rule, and the first in hypothesis's order: a batch's first program, its
        simplest, is made of it.)"""
        for made in self.made.values():
            answer = self.api.call("GET", made.path)
            if made.deleted:
                assert answer.status_code == 410, answer.text
                continue
            assert answer.status_code == 200, answer.text
            shown = answer.json()
            assert {field: shown[field] for field in made.fields} == {
                field: str(ipaddress.ip_network(value)) if field == "cidr" else value
                for field, value in made.fields.items()
            }, shown

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), same_body=st.booleans())
    def replay(self, data, same_body):
        """A keyed create sent again: the same body, or another one."""
        key = pick(data, sorted(self.keys), "key")
        made = self.made[self.keys[key]]
        body = self.bodies[key] if same_body else {**self.bodies[key], "storage_gb": 4096}
        found = self.api.call("GET", "/v1/clusters", params={"idempotency_key": key})
        assert found.status_code == 200, found.text
        listed = [item["id"] for item in found.json()["items"]]
        purged = made.key in self.vanished
        assert listed == ([] if made.deleted else [made.key[1]]), (key, listed)
        answer = self.api.call("POST", "/v1/clusters", json=body, headers={"Idempotency-Key": key})
        if purged:  # the key lives as long as its object: free again
            assert answer.status_code == 201, answer.text
            self._made(answer.json(), CLUSTERS, body, None, key)
        elif made.deleted:
            assert answer.status_code in ((410,) if same_body else (410, 422)), answer.text
        elif same_body:
            assert answer.status_code == 200 and answer.json()["id"] == made.key[1], answer.text
            assert answer.headers.get("Idempotent-Replayed") == "true"
        else:
            assert answer.status_code == 422 and answer.json()["code"] == "idempotency_key_reused", answer.text

    @rule(data=st.data(), reuse=st.booleans(), ours=st.booleans())
    def internal_create(self, data, reuse, ours):
        """Another caller of cluster_svc creates an object with its own ID: another team's reusing
        one of the platform's IDs, or a new ID of another team or of the account's own (an orphan)."""
        table = data.draw(st.sampled_from([CLUSTERS, RULES]), label="table")
        reusable = self.names_of(table)
        if reuse and reusable:
            # Above all an ID cluster_svc does not hold yet (a create still pending, a row removed):
            # one it holds answers 409 and nothing happens.
            absent = [name for name in reusable if self.made[name].key not in self.downstream]
            object_id, team = self.made[pick(data, absent or reusable, "reusing")].key[1], self.other_team
        else:
            object_id, team = str(uuid7_ago(0)), self.account_id if ours else self.other_team
        if table == CLUSTERS:
            body = {**data.draw(cluster_bodies, label="body"), "id": object_id, "team_id": team}
            answer = self.world.internal("POST", "/v1/clusters", json=body)
        else:
            cluster = str(uuid7_ago(0))  # its own cluster, of the same team
            parent = {**data.draw(cluster_bodies, label="its cluster"), "id": cluster, "team_id": team}
            made_parent = self.world.internal("POST", "/v1/clusters", json=parent)
            assert made_parent.status_code == 201, made_parent.text
            self.others[(CLUSTERS, cluster)] = {}
            body = {**data.draw(rule_bodies, label="body"), "id": object_id}
            answer = self.world.internal("POST", f"/v1/clusters/{cluster}/firewall-rules", json=body)
        if answer.status_code == 201:
            self.others[(table, object_id)] = {}  # filled in from cluster_svc's database at the next check
        else:
            assert reuse and answer.status_code in (409, 410), answer.text

    # -- the rules: faults -----------------------------------------------------------------------

    @precondition(lambda self: self.outages < MAX_OUTAGES)
    @rule(data=st.data(), writes=st.integers(1, 2))
    def outage(self, data, writes):
        """cluster_svc frozen while public writes come (each answered without it), then thawed.

        The costliest step: a write waits for its inline push to time out (1 s) until the
        breaker opens, so a program has few of them."""
        self.outages += 1
        self.world.freeze()
        try:
            for _ in range(writes):
                self.public_write(data)
                self.check()
        finally:
            self.world.thaw()

    # Two rules, so that hand edits come as often as the actions that may be fooled by them.
    @precondition(lambda self: self.made)
    @rule(data=st.data(), kind=st.sampled_from(FIELD_EDITS), generations=st.sampled_from([0, 1, -1]))
    def hand_edit_field(self, data, kind, generations):
        """A person edits a field of cluster_svc's copy, moving its generation or not."""
        self.hand_edit(data, kind, generations)

    @precondition(lambda self: self.made)
    @rule(data=st.data(), kind=st.sampled_from(ROW_EDITS))
    def hand_edit_row(self, data, kind):
        """A person deletes, removes, moves or puts back cluster_svc's copy."""
        self.hand_edit(data, kind, 0)

    def hand_edit(self, data, kind: str, generations: int) -> None:
        """A person edits cluster_svc's database behind the platform's back: one of the objects it
        holds alive."""
        held = sorted(name for name, made in self.made.items() if self.held_alive(made) and (
            kind != "move_child" or made.key[0] == RULES) and (kind != "put_back_older" or self.older(made)))
        name = pick(data, held or ["nothing"], "object")
        made = self.made.get(name)
        copy = self.downstream.get(made.key) if made else None
        homes = [m.key for m in self.made.values() if m.key[0] == CLUSTERS and self.held_alive(m)
                 and copy is not None and m.key[1] != str(copy.get("cluster_id"))]
        home = pick(data, homes or [None], "to")
        if made is None or (kind == "move_child" and home is None):
            note(f"hand edit {kind} of {name}: not applicable, nothing done")
            return
        self._taint(made)
        if kind == "delete_copy":
            self.world.delete_copy(made.key)
        elif kind == "remove_row":
            if made.key[0] == CLUSTERS:  # its rules' rows go too, tombstones included: their IDs are free again
                self.dead.difference_update(self.world.rules_under(made.key[1]))
            self.world.remove_row(made.key)
        elif kind == "put_back_older":
            self.world.put_back(made.key, self.older(made)[-1])
        elif kind == "move_child":
            self.world.set_columns(made.key, {"cluster_id": home[1]})
        else:
            edited = self._edited(made.key[0], copy, immutable=kind == "edit_immutable")
            self.world.set_columns(made.key, edited, generations)

    def older(self, made: Made) -> list[dict]:
        """cluster_svc's earlier copies of ``made`` (as seen after earlier steps), below its generation now."""
        copy = self.downstream[made.key]
        return [c for generation, c in sorted(self.copies.get(made.key, {}).items()) if generation < copy["generation"]]

    def _edited(self, table: str, copy: dict, *, immutable: bool) -> dict:
        if table == RULES:
            return {"cidr": "172.16.0.0/12"} if immutable else {"description": "edited by hand"}
        if immutable:
            return {"region": next(r for r in REGIONS if r != copy["region"])}
        return {"plan": next(p for p in PLANS if p != copy["plan"])}

    def _taint(self, made: Made) -> None:
        """``made`` and whatever lies under it differ from now on behind the platform's back."""
        keys = [made.key]
        if made.key[0] == CLUSTERS:
            keys += [m.key for m in self.made.values() if m.parent == made.key]
            keys += self.world.rules_under(made.key[1])
        for key in keys:
            row = self.platform.get(key)
            self.taints[key] = None if row is None else fingerprint(row)

    # -- the rules: the operator -----------------------------------------------------------------

    def command(self, *args: str, codes=(0,)) -> str:
        result = self.world.platform_svc(*args)
        assert result.returncode in codes and "Traceback" not in result.stderr, (args, result.stdout, result.stderr)
        return result.stdout

    @rule()
    def reconcile(self):
        self.command("reconcile", "--once", "--push-timeout", "5", codes=(0, 1))

    @rule()
    def repair(self):
        """One repair pass: every difference a hand edit made is found, so nothing is exempt any more."""
        assert "repair:" in self.command("repair")
        self.taints.clear()

    @rule(data=st.data())
    def retry_failed(self, data):
        """``sync-status --retry-failed``, whole or narrowed, then the reconciler pushes what it put back;
        or decision 0014's way out for a failed cluster: deleted on the platform, then retried by ID."""
        choices = [[]]
        if RETRY_NARROWING:
            failed = self.names_of(CLUSTERS, RULES, where=lambda m: self.platform.get(m.key, {}).get(
                "sync_state") == "failed")
            choices += [["--reason", "conflict"], ["--reason", "deleted"], ["--resource", "clusters"], ["way out"]]
            choices += [["--id", self.made[name].key[1]] for name in failed]
        narrowing = pick(data, choices, "narrowing")
        way_out = pick(data, self.failed_clusters() or [None], "failed cluster")
        if narrowing == ["way out"] and way_out is not None:
            self.way_out(self.made[way_out])
            return
        self.command("sync-status", "--retry-failed", *[arg for arg in narrowing if arg != "way out"])
        self.check()
        self.reconcile()

    def way_out(self, made: Made) -> None:
        """Decision 0014: both sides agree the cluster is deleted, unless cluster_svc's copy is another
        object (which stays as it is, and the row failed)."""
        self.delete(made.name)
        self.check()
        self.command("sync-status", "--retry-failed", "--id", made.key[1])
        self.check()
        self.reconcile()
        self.check()
        copy = self.downstream.get(made.key)
        row = self.platform[made.key]
        others = copy is not None and copy["deleted_at"] is None and any(
            str(copy[column]) != str(expected) for column, expected in self.fixed(made).items()
        )
        if others:
            assert row["sync_state"] == "failed", row
        else:
            assert (row["sync_state"], row["sync_error"]) == ("synced", None) and row["deleted_at"], row

    def conflicted(self) -> list[str]:
        """The failed rows whose reason is an ``id_conflict``."""
        return self.names_of(CLUSTERS, RULES, where=lambda m: self.platform.get(m.key, {}).get("sync_state") == "failed"
                             and "id_conflict" in (self.platform[m.key]["sync_error"] or ""))

    @precondition(lambda self: self.conflicted())
    @rule(data=st.data())
    def abandon_a_conflict(self, data):
        self.abandon(self.made[pick(data, self.conflicted(), "abandoned")])

    def abandon(self, made: Made) -> None:
        """The way out of an ``id_conflict`` that needs no one else: ``platform-svc abandon``. The row
        and its rules are closed, deleted and never pushed, and what cluster_svc holds under the ID
        is left as it was (the invariant checks every other caller's object after each step)."""
        before = self.downstream.get(made.key)
        result = self.world.platform_svc("abandon", made.key[0], made.key[1])
        self.check()
        row = self.platform[made.key]
        if result.returncode == 1:  # its copy there turned out to be the platform's own: left failed
            assert "not abandoned" in result.stderr and row["sync_state"] == "failed", (result.stderr, row)
            return
        assert result.returncode == 0, result.stderr
        self.delete_acknowledged(made)
        for key, closed in self.platform.items():
            if key == made.key or (made.key[0] == CLUSTERS and str(closed.get("cluster_id")) == made.key[1]):
                assert (closed["sync_state"], closed["abandoned_at"] is not None, closed["deleted_at"] is not None) == (
                    "synced", True, True), closed
        assert self.downstream.get(made.key) == before or before is None  # nothing sent for it
        self.reconcile()
        self.repair()
        assert self.platform[made.key]["abandoned_at"] is not None  # and it stays closed

    @precondition(lambda self: any(made.deleted for made in self.made.values()))
    @rule()
    def purge(self):
        """Both purges, as the reconciler's periodic pass and ``cluster-svc purge --every`` run them."""
        assert "purge:" in self.command("purge")
        result = self.world.cluster_svc("purge")
        assert result.returncode == 0 and "purge:" in result.stdout, result.stderr

    def teardown(self):
        if self.world.frozen:
            self.world.thaw()

    # -- after every step ------------------------------------------------------------------------

    @invariant()
    def promises_hold(self):
        self.check()

    def check(self) -> None:
        platform = self.world.platform_rows(self.account_id)
        downstream = self.world.cluster_rows({*platform, *(m.key for m in self.made.values()), *self.others})
        self._synced_is_held(platform, downstream)
        self._others_unchanged(downstream)
        self._nothing_comes_back(platform, downstream)
        self._acknowledged_kept(platform)
        self._remember(platform, downstream)

    def fixed(self, made: Made) -> dict[str, Any]:
        """What no update changes: the ancestry and the immutable fields, as the platform has them."""
        table = made.key[0]
        ancestry = {"team_id": self.account_id} if table == CLUSTERS else {"cluster_id": made.parent[1]}
        return {**ancestry, **{name: made.fields[name] for name in DECLARED[table].immutable}}

    def _synced_is_held(self, platform: dict[Key, dict], downstream: dict[Key, dict]) -> None:
        for key, row in platform.items():
            if row["sync_state"] != "synced" or self.taints.get(key, ()) == fingerprint(row) or row["abandoned_at"]:
                continue  # an abandoned row was never the platform's downstream: what is there is another's
            what = f"{key[0][:-1]} {key[1]} ({self.by_key(key).name if self.by_key(key) else '?'})"
            assert row["sync_error"] is None, f"{what} reads synced beside the error {row['sync_error']!r}"
            copy = downstream.get(key)
            alive = alive_in(key, copy, downstream)
            if row["deleted_at"] is not None:
                assert not alive, f"{what} is deleted and synced on the platform, alive in cluster_svc: {copy}"
                continue
            assert alive, f"{what} is alive and synced on the platform, not alive in cluster_svc: {copy}"
            ancestry = [c for c in OWNED[key[0]] if str(copy[c]) != str(row["account_id" if c == "team_id" else c])]
            assert not ancestry, f"{what} is synced, cluster_svc holds it under another {ancestry}: {copy}"
            immutable = [c for c in DECLARED[key[0]].immutable if str(copy[c]) != str(row[c])]
            assert not immutable, f"{what} is synced, cluster_svc holds another {immutable}: {copy}"
            mutable = [c for c in [*DECLARED[key[0]].mutable, "generation"] if str(copy[c]) != str(row[c])]
            assert not mutable, f"{what} is synced at {row['generation']}, cluster_svc holds other {mutable}: {copy}"

    def _others_unchanged(self, downstream: dict[Key, dict]) -> None:
        for key, created in self.others.items():
            now = downstream.get(key)
            assert now is not None and now["deleted_at"] is None, f"another caller's {key} is gone: {now}"
            if not created:
                self.others[key] = created = {c: v for c, v in now.items() if c != "updated_at"}
            changed = {c: (v, now[c]) for c, v in created.items() if now[c] != v}
            assert not changed, f"another caller's {key} was changed: {changed}"

    def _nothing_comes_back(self, platform: dict[Key, dict], downstream: dict[Key, dict]) -> None:
        for key in self.dead:
            copy = downstream.get(key)
            assert copy is None or copy["deleted_at"] is not None, f"{key} was deleted in cluster_svc, is alive again"
        for key in self.vanished:
            assert key not in platform, f"{key} was purged from the platform, is back: {platform[key]}"
        for made in self.made.values():
            row = platform.get(made.key)
            if made.deleted and row is not None:
                assert row["deleted_at"] is not None, f"{made.name} was deleted on the platform, is alive again"

    def _acknowledged_kept(self, platform: dict[Key, dict]) -> None:
        horizon = self.world.pair.horizon
        for made in self.made.values():
            row = platform.get(made.key)
            if row is None:
                assert made.key in self.vanished or (
                    made.deleted and horizon.expired(made.key[1])
                    and self.platform.get(made.key, {}).get("delete_synced_at") is not None
                ), f"{made.name}, acknowledged, is gone from the platform (last seen {self.platform.get(made.key)})"
                self.vanished.add(made.key)
                continue
            differing = {f: (v, row[f]) for f, v in made.fields.items() if str(row[f]) != str(v)}
            assert not differing and str(row["account_id"]) == self.account_id, f"{made.name} lost {differing}"
            if made.parent is not None:
                assert str(row["cluster_id"]) == made.parent[1], f"{made.name} moved on the platform"

    def _remember(self, platform: dict[Key, dict], downstream: dict[Key, dict]) -> None:
        self.platform, self.downstream = platform, downstream
        for key, copy in downstream.items():
            if copy["deleted_at"] is not None:
                self.dead.add(key)
            elif self.by_key(key) is not None and key not in self.others:
                self.copies.setdefault(key, {}).setdefault(copy["generation"], dict(copy))


def pick(data, items: list, label: str) -> Any:
    """One of ``items``, drawn the same way whatever they are.

    hypothesis replays the start of a program to explore what may follow it, and expects the
    same draws each time. What the pair answered (which rows failed, which copies cluster_svc
    holds, what a purge removed) can differ from one run of a program to the next, so a draw
    never depends on it: an index, whose meaning may.
    """
    chosen = items[data.draw(st.integers(0, 15), label=label) % len(items)]
    note(f"{label}: {chosen}")
    return chosen


def fingerprint(row: dict) -> tuple:
    """What the platform records about a row's sync: it changes whenever the platform decides something new."""
    return tuple(row[column] for column in FINGERPRINT)


def alive_in(key: Key, copy: dict | None, downstream: dict[Key, dict]) -> bool:
    """Whether cluster_svc holds this object alive: its row, and a rule's cluster (a rule under a
    deleted cluster is gone, as cluster_svc answers it)."""
    if copy is None or copy["deleted_at"] is not None:
        return False
    if key[0] == RULES:
        cluster = downstream.get((CLUSTERS, str(copy["cluster_id"])))
        return cluster is not None and cluster["deleted_at"] is None
    return True


@pytest.fixture(scope="module")
def world(pg_server_url, tmp_path_factory):
    """One pair for every program: one worker per service (one inline breaker), a horizon of seconds."""
    workdir = tmp_path_factory.mktemp("model")
    pair = start_pair(pg_server_url, workdir, workers=1, env={"ID_HORIZON_SECONDS": str(SIZE.horizon)})
    try:
        yield World(pair, Commands(workdir))
    finally:
        pair.stop()


def test_every_action_keeps_the_promises(world):
    """The model's programs, in seeded batches until the size's time has passed: ``CHAOS_SEED=N``
    replays them, and ``CHAOS_MODEL_BATCH=K CHAOS_MODEL_PROGRAMS=N`` runs batch K alone (a failure
    says which).

    Each batch is a hypothesis run of its own, seeded from CHAOS_SEED and its number; the first
    has a few programs, each next one as many as half the time left holds at the pace so far (a
    run starts with its simplest program, so few long batches are better than many short ones).
    """
    PairModel.world = world
    only = os.environ.get("CHAOS_MODEL_BATCH", "").strip()
    programs = int(os.environ.get("CHAOS_MODEL_PROGRAMS", "").strip() or FIRST_BATCH)
    batch, ran, started = int(only or 0), 0, time.monotonic()
    while True:
        run = get_state_machine_test(
            PairModel,
            settings=settings(
                max_examples=programs,
                stateful_step_count=SIZE.steps,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
        try:
            seed(seed_for(f"model batch {batch}"))(run)()
        except BaseException as exc:
            exc.add_note(f"model batch {batch}: CHAOS_MODEL_BATCH={batch} CHAOS_MODEL_PROGRAMS={programs} runs it alone")
            raise
        batch, ran = batch + 1, ran + programs
        pace = (time.monotonic() - started) / ran
        # Half the time left at the pace so far: programs differ in cost, and the last batch must not overrun.
        programs = int((SIZE.seconds - (time.monotonic() - started)) / pace / 2)
        if only or programs < 2:
            print(f"model: {ran} programs of up to {SIZE.steps} steps in {batch} batches, {pace:.1f} s each")
            return
