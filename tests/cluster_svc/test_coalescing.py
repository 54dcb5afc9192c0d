"""Single creates in flight share one flush (shared.coalesce), and each still gets
the answer it would get alone, in the order the flush holds them.

Concurrency is real: each request runs in a thread of its own against the app
and a real PostgreSQL. To make a flush hold exactly the requests a scenario
sends, a *gate* create goes first and waits on a row lock a blocking
transaction holds; the scenario's requests queue behind it meanwhile (their
order in the queue is read: it is the commit order), then the blocker rolls
back, the gate's flush ends and the next flush holds all of them.
"""
from __future__ import annotations

import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from tests.cluster_svc.test_batch_equivalence import PARENTS, PRESTATES, SLOTS, World
from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.pair import TOKEN
from tooling.testing import wait_for

VARIANTS = ("same", "mutable", "immutable", "invalid")
WORLDS = 2  # independent starting states (a rule world each under its own cluster): one flush holds both


def creates_of(app, resource_key: str):
    """The app's coalescer of single creates of one resource."""
    return app.view_functions[f"clusters.{resource_key}_collection"].view_class.creates


def post(app, url: str, body: dict):
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    return client.post(url, json=body)


def lock_waiters(engine) -> list[int]:
    """The backends of this test's database waiting on a lock."""
    with engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )).scalars())


def blocked_by(engine, pid: int) -> list[int]:
    """The backends waiting on a lock that backend ``pid`` holds."""
    with engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
        ), {"pid": pid}).scalars())


class Gate:
    """A create of ``url`` + ``body`` that waits on the row a blocking transaction inserted
    with the same ID (``insert``), holding its coalescer's flush until :meth:`open`."""

    def __init__(self, app, engine, pool: ThreadPoolExecutor, url: str, body: dict, insert: str) -> None:
        self.blocker = engine.connect()
        self.transaction = self.blocker.begin()
        self.blocker.execute(text(insert), body)  # a tombstone (a complete row is not needed), rolled back
        waiting = len(lock_waiters(engine))
        self.answer = pool.submit(post, app, url, body)
        try:
            wait_for(
                lambda: len(lock_waiters(engine)) > waiting,
                what="the gate's create waiting on the lock", timeout=10, poll=0.002,
            )
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if not self.blocker.closed:
            self.transaction.rollback()
            self.blocker.close()

    def open(self) -> int:
        self.release()
        return self.answer.result(timeout=30).status_code


def cluster_gate(app, engine, pool) -> Gate:
    return Gate(app, engine, pool, "/v1/clusters", internal_cluster_body(),
                "INSERT INTO clusters (id, deleted_at) VALUES (CAST(:id AS uuid), now())")


def rule_gate(app, engine, pool) -> Gate:
    cluster = post(app, "/v1/clusters", internal_cluster_body()).get_json()
    return Gate(app, engine, pool, f"/v1/clusters/{cluster['id']}/firewall-rules", internal_rule_body(),
                "INSERT INTO firewall_rules (id, cluster_id, deleted_at)"
                f" VALUES (CAST(:id AS uuid), '{cluster['id']}', now())")


def answer(response) -> dict:
    """What the caller sees: status, body, and the headers a create answers with."""
    return {
        "status": response.status_code,
        "body": response.get_json(),
        "location": response.headers.get("Location"),
        "replayed": response.headers.get("Idempotent-Replayed"),
        "retry_after": response.headers.get("Retry-After"),
    }


def sent(body: dict, values: dict) -> bool:
    """Whether a queued item's values are those of this request body (IDs differ between worlds)."""
    return all(str(values[name]) == str(value) for name, value in body.items())


@st.composite
def scenarios(draw, resource):
    worlds = []
    for _ in range(WORLDS):
        prestates = draw(st.lists(st.sampled_from(PRESTATES[resource]), min_size=SLOTS, max_size=SLOTS))
        parent = draw(st.sampled_from(PARENTS)) if resource == "rules" else None
        worlds.append((prestates, parent))
    requests = draw(st.lists(
        st.tuples(st.integers(0, WORLDS - 1), st.integers(0, SLOTS - 1), st.sampled_from(VARIANTS)),
        min_size=2, max_size=10,
    ))
    return worlds, requests


@pytest.mark.parametrize("resource", ["clusters", "rules"])
def test_concurrent_creates_answer_what_they_would_one_at_a_time_in_commit_order(app, engine, resource):
    """Creates, replays, conflicts, repeated IDs, tombstones, deleted and missing parents,
    invalid bodies, for two parents at once: one flush answers each as its create alone,
    in the flush's order, would be answered, and stores the same rows."""
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    creates = creates_of(app, "cluster" if resource == "clusters" else "firewall_rule")
    gate_for = cluster_gate if resource == "clusters" else rule_gate

    @given(scenario=scenarios(resource))
    @settings(max_examples=25, deadline=None, derandomize=True, database=None)
    def check(scenario):
        starts, requests = scenario
        flushed = [World(client, resource, *start) for start in starts]
        alone = [World(client, resource, *start) for start in starts]
        bodies = [flushed[world].body(slot, variant) for world, slot, variant in requests]
        valid = sum(variant != "invalid" for _, _, variant in requests)

        with ThreadPoolExecutor(len(requests) + 1) as pool:
            gate = gate_for(app, engine, pool)
            try:
                flushes, items = creates.flushes, creates.items
                futures = [pool.submit(post, app, flushed[world].single_url, body)
                           for (world, _, _), body in zip(requests, bodies)]
                wait_for(
                    lambda: len(creates._queue) == valid,
                    what="every valid create queued behind the gate", timeout=10, poll=0.002,
                )
                queued = [waiter.item for waiter in creates._queue]
                assert gate.open() == 201
            finally:
                gate.release()
            answers = [answer(future.result(timeout=30)) for future in futures]
        # The gate's flush, then one holding all of them.
        assert (creates.flushes - flushes, creates.items - items) == (1 + (valid > 0), 1 + valid)

        # The same requests, one at a time: the valid ones in the order the flush held them.
        order = []
        for values in queued:
            order.append(next(i for i, body in enumerate(bodies) if i not in order and sent(body, values)))
        order += [i for i in range(len(requests)) if i not in order]  # the invalid ones (422, nothing stored)
        one_by_one = {}
        for i in order:
            world, slot, variant = requests[i]
            one_by_one[i] = answer(client.post(alone[world].single_url, json=alone[world].body(slot, variant)))

        # Identical requests cannot be told apart in the queue: compared as a group, any order.
        groups = defaultdict(lambda: ([], []))
        for i, request in enumerate(requests):
            world = request[0]
            groups[request][0].append(json.dumps(flushed[world].neutral(answers[i]), sort_keys=True))
            groups[request][1].append(json.dumps(alone[world].neutral(one_by_one[i]), sort_keys=True))
        for request, (got, alone_got) in groups.items():
            assert sorted(got) == sorted(alone_got), request
        for world in range(WORLDS):
            assert flushed[world].rows() == alone[world].rows()

    check()


def test_a_database_error_in_a_flush_gives_503_to_that_flushs_creates_only(app, engine):
    """Three flushes: the first waits on a lock, the second queues behind it and then
    waits on another, and its backend is terminated (a real fault); the third queues
    behind the second. Only the second flush's creates answer 503 (with Retry-After),
    and they stored nothing; sent again, they are created."""
    creates = creates_of(app, "cluster")
    held = internal_cluster_body()
    second = [internal_cluster_body(), internal_cluster_body(), held]
    third = [internal_cluster_body(), internal_cluster_body()]
    with ThreadPoolExecutor(8) as pool:
        # Released before the pool waits for its threads, also when an assertion fails here:
        # else the threads wait on its lock and the pool on them, for ever.
        second_blocker = engine.connect()
        second_transaction = second_blocker.begin()
        try:
            second_blocker.execute(
                text("INSERT INTO clusters (id, deleted_at) VALUES (CAST(:id AS uuid), now())"), held
            )
            blocker_pid = second_blocker.execute(text("SELECT pg_backend_pid()")).scalar_one()
            gate = cluster_gate(app, engine, pool)
            in_second = [pool.submit(post, app, "/v1/clusters", body) for body in second]
            wait_for(
                lambda: len(creates._queue) == len(second),
                what="the second flush's creates queued", timeout=10, poll=0.002,
            )
            assert gate.open() == 201
            # The second flush's backend: the one waiting on the second blocker's lock (it may be
            # the pooled connection the gate's flush used, so it is found by what it waits on).
            wait_for(
                lambda: blocked_by(engine, blocker_pid),
                what="the second flush waiting on its lock", timeout=10, poll=0.002,
            )
            in_third = [pool.submit(post, app, "/v1/clusters", body) for body in third]
            wait_for(
                lambda: len(creates._queue) == len(third),
                what="the third flush's creates queued", timeout=10, poll=0.002,
            )
            [flusher] = blocked_by(engine, blocker_pid)
            with engine.connect() as conn:
                assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": flusher}).scalar()
            failed = [answer(future.result(timeout=30)) for future in in_second]
            succeeded = [answer(future.result(timeout=30)) for future in in_third]
        finally:
            second_transaction.rollback()
            second_blocker.close()

    assert [(a["status"], a["body"]["code"], a["retry_after"]) for a in failed] == [(503, "unavailable", "2")] * 3
    assert [a["status"] for a in succeeded] == [201, 201]
    for body in second:
        assert post(app, "/v1/clusters", body).status_code == 201  # nothing of the failed flush was stored
