"""A batch is its items' single creates, one by one: for random mixes of new,
existing, tombstoned, conflicting, repeated and invalid items, the batch answers
each item exactly what the single create route answers when the same items are
sent alone in the same order, and leaves the same rows behind.

Two "worlds" hold the same starting state under different IDs: one receives
the batch, the other the single creates; answers and rows are compared with
the IDs mapped back to their slots.
"""
from __future__ import annotations

import json
import re
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooling.pair import TOKEN
from tooling.testing import db_row

SLOTS = 4
PRESTATES = {
    "clusters": ("absent", "alive", "deleted"),
    "rules": ("absent", "alive", "deleted", "elsewhere"),
}
VARIANTS = ("same", "mutable", "immutable", "invalid")
PARENTS = ("alive", "deleted", "missing")
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1")
TEAMS = [str(uuid.UUID(int=0xA000 + slot)) for slot in range(SLOTS)]  # shared by both worlds


def cluster_item(slot, variant):
    body = {
        "team_id": TEAMS[slot],
        "name": f"slot-{slot}",
        "region": REGIONS[slot],
        "postgres_version": 14 + slot,
        "plan": "hobby-0",
        "storage_gb": 10 + slot,
    }
    if variant == "mutable":
        body.update(name="changed", plan="memory-8", storage_gb=500)
    elif variant == "immutable":
        body.update(region=REGIONS[(slot + 1) % len(REGIONS)])
    elif variant == "invalid":
        body.update(plan="no-such-plan")
    return body


def rule_item(slot, variant):
    body = {"cidr": f"10.{slot}.0.0/16", "description": f"slot {slot}"}
    if variant == "mutable":
        body.update(description="changed")
    elif variant == "immutable":
        body.update(cidr=f"192.168.{slot}.0/24")
    elif variant == "invalid":
        body.update(cidr="10.0.0.1/8")
    return body


class World:
    """One copy of the starting state, under its own IDs."""

    def __init__(self, client, resource, prestates, parent):
        self.client = client
        self.resource = resource
        self.ids = [str(uuid.uuid4()) for _ in range(SLOTS)]
        self.names = {object_id: f"<slot{slot}>" for slot, object_id in enumerate(self.ids)}
        if resource == "clusters":
            for slot, state in enumerate(prestates):
                if state != "absent":
                    self.must(201, "POST", "/v1/clusters", self.body(slot, "same"))
                if state == "deleted":
                    self.must(204, "DELETE", f"/v1/clusters/{self.ids[slot]}")
            self.single_url, self.batch_url = "/v1/clusters", "/v1/clusters/batch"
            return
        home, other = str(uuid.uuid4()), str(uuid.uuid4())
        for cluster_id, slot in ((home, 0), (other, 1)):
            self.must(201, "POST", "/v1/clusters", {"id": cluster_id, **cluster_item(slot, "same")})
        for slot, state in enumerate(prestates):
            if state != "absent":
                where = other if state == "elsewhere" else home
                self.must(201, "POST", f"/v1/clusters/{where}/firewall-rules", self.body(slot, "same"))
            if state == "deleted":
                self.must(204, "DELETE", f"/v1/clusters/{home}/firewall-rules/{self.ids[slot]}")
        if parent == "deleted":
            self.must(204, "DELETE", f"/v1/clusters/{home}")
        target = str(uuid.uuid4()) if parent == "missing" else home
        self.names.update({home: "<home>", other: "<other>", target: "<target>"})
        self.single_url = f"/v1/clusters/{target}/firewall-rules"
        self.batch_url = f"{self.single_url}/batch"

    def must(self, status, method, url, body=None):
        response = self.client.open(url, method=method, json=body)
        assert response.status_code == status, response.get_data(as_text=True)

    def body(self, slot, variant):
        make = cluster_item if self.resource == "clusters" else rule_item
        return {"id": self.ids[slot], **make(slot, variant)}

    def neutral(self, value):
        """``value`` with this world's IDs named by slot and timestamps left out."""
        text = json.dumps(value, default=str, sort_keys=True)
        text = re.sub("|".join(map(re.escape, self.names)), lambda match: self.names[match.group(0)], text)
        return _without_timestamps(json.loads(text))

    def rows(self):
        table = "clusters" if self.resource == "clusters" else "firewall_rules"
        return self.neutral([db_row(self.client.application.extensions["database"].engine, table, i) for i in self.ids])


def _without_timestamps(value):
    if isinstance(value, dict):
        return {
            key: (item is not None if key == "deleted_at" else _without_timestamps(item))
            for key, item in value.items()
            if key not in ("created_at", "updated_at")
        }
    if isinstance(value, list):
        return [_without_timestamps(item) for item in value]
    return value


@st.composite
def scenarios(draw, resource):
    prestates = draw(st.lists(st.sampled_from(PRESTATES[resource]), min_size=SLOTS, max_size=SLOTS))
    items = draw(st.lists(st.tuples(st.integers(0, SLOTS - 1), st.sampled_from(VARIANTS)), min_size=1, max_size=8))
    parent = draw(st.sampled_from(PARENTS)) if resource == "rules" else None
    return prestates, items, parent


@pytest.mark.parametrize("resource", ["clusters", "rules"])
def test_a_batch_answers_and_stores_what_the_single_creates_one_by_one_do(app, resource):
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"

    @given(scenario=scenarios(resource))
    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    def check(scenario):
        prestates, items, parent = scenario
        batched, one_by_one = (World(client, resource, prestates, parent) for _ in range(2))

        response = client.post(batched.batch_url, json={"items": [batched.body(*item) for item in items]})
        assert response.status_code == 200, response.get_data(as_text=True)
        singles = []
        for item in items:
            single = client.post(one_by_one.single_url, json=one_by_one.body(*item))
            key = "object" if single.status_code in (200, 201) else "problem"
            singles.append({"status": single.status_code, key: single.get_json()})

        assert batched.neutral(response.get_json()["results"]) == one_by_one.neutral(singles)
        assert batched.rows() == one_by_one.rows()

    check()
