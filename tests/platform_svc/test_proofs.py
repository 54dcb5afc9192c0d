"""The one judgement of an answer (platform_svc.push.recording.change_for): a row is confirmed only by
an answer that proves cluster_svc holds it as the platform says. No database and no network: the
row is what the platform read, the answer what the client made of cluster_svc's reply."""
from __future__ import annotations

import uuid

import pytest

from platform_svc.models import RESOURCES
from platform_svc.push.recording import (
    AHEAD,
    CONFIRMED,
    DELETE_CONFIRMED,
    DUE_NOW,
    REFUSED,
    REFUSED_UNLESS_DELETED,
    RETRY_LATER,
    change_for,
)
from platform_svc.push.schedule import RetryPolicy
from shared.client import Answer, Operation, Outcome
from shared.declaration import HIGHEST_GENERATION

CLUSTER, RULE = RESOURCES["cluster"], RESOURCES["firewall_rule"]
ACCOUNT, CLUSTER_ID, RULE_ID = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


def row(resource, **overrides):
    common = {"account_id": ACCOUNT, "generation": 2, "synced_generation": 1, "deleted_at": None, "attempts": 0}
    if resource is CLUSTER:
        own = {"id": CLUSTER_ID, "name": "main-db", "region": "eu-west-1", "postgres_version": 16,
               "plan": "standard-2", "storage_gb": 100}
    else:
        own = {"id": RULE_ID, "cluster_id": CLUSTER_ID, "cidr": "10.0.0.0/16", "description": "office"}
    return {**common, **own, **overrides}


def copy(resource, **overrides):
    """cluster_svc's copy of ``row(resource)`` at generation 2, as its answer's body spells it."""
    if resource is CLUSTER:
        body = {"id": str(CLUSTER_ID), "team_id": str(ACCOUNT), "name": "main-db", "region": "eu-west-1",
                "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}
    else:
        body = {"id": str(RULE_ID), "cluster_id": str(CLUSTER_ID), "cidr": "10.0.0.0/16", "description": "office"}
    return {**body, "generation": 2, "deleted_at": None, **overrides}


def judged(resource, answer_body, *, status=200, operation=Operation.UPDATE, inline=False, **row_overrides):
    answer = Answer(Outcome.DONE, status, answer_body, f"PUT ...: {status}", operation)
    return change_for(resource, row(resource, **row_overrides), answer, RetryPolicy(), inline=inline)


@pytest.mark.parametrize("resource", [CLUSTER, RULE])
def test_a_copy_at_the_rows_generation_with_its_fields_and_ancestry_confirms_it(resource):
    change = judged(resource, copy(resource))
    assert (change.kind, change.confirmed) == (CONFIRMED, 2)


def test_a_copy_below_the_rows_generation_confirms_only_what_it_shows():
    change = judged(CLUSTER, copy(CLUSTER, generation=1, storage_gb=50), operation=Operation.CREATE)
    assert (change.kind, change.confirmed) == (CONFIRMED, 1)  # the row stays pending: the update follows


@pytest.mark.parametrize(
    ("resource", "theirs", "named"),
    [
        (CLUSTER, {"team_id": str(uuid.uuid4())}, "team_id"),
        (CLUSTER, {"region": "us-east-1"}, "region"),
        (CLUSTER, {"region": "us-east-1", "generation": 7}, "region"),  # never hidden behind "ahead"
        (RULE, {"cluster_id": str(uuid.uuid4())}, "cluster_id"),
        (RULE, {"cidr": "10.9.0.0/16", "generation": 1}, "cidr"),
        (RULE, {"cluster_id": None}, "cluster_id"),  # missing ancestry proves nothing
    ],
)
def test_a_copy_that_is_not_this_object_fails_the_row_naming_what_differs(resource, theirs, named):
    change = judged(resource, copy(resource, **theirs))
    assert change.kind == REFUSED_UNLESS_DELETED and "diverged" in change.reason and named in change.reason


@pytest.mark.parametrize("theirs", [{"generation": 5}, {"name": "hand-edit"}])
def test_a_copy_ahead_or_with_other_mutable_fields_confirms_nothing(theirs):
    change = judged(CLUSTER, copy(CLUSTER, **theirs))
    assert change.kind == AHEAD


def test_a_copy_at_the_highest_generation_fails_the_row_instead_of_overflowing_it():
    """A generation set by hand downstream to the integer's limit: moving past it would overflow the
    platform's column (a 500 on the next PATCH, then a traceback at every push, the row stalled)."""
    change = judged(CLUSTER, copy(CLUSTER, generation=HIGHEST_GENERATION))
    assert change.kind == REFUSED and "highest" in change.reason
    assert judged(CLUSTER, copy(CLUSTER, generation=HIGHEST_GENERATION - 1)).kind == AHEAD  # can still be passed


@pytest.mark.parametrize(
    "body", [None, "ok", {}, {"id": str(CLUSTER_ID)}, copy(CLUSTER, id=str(uuid.uuid4())), copy(CLUSTER, generation=True)]
)
@pytest.mark.parametrize("inline", [True, False])
def test_a_success_that_does_not_show_the_object_proves_nothing_and_is_tried_again(body, inline):
    change = judged(CLUSTER, body, inline=inline)
    assert change.kind == (DUE_NOW if inline else RETRY_LATER) and "proves nothing" in change.reason


def test_a_success_showing_a_deleted_copy_never_confirms_a_live_row():
    assert judged(CLUSTER, copy(CLUSTER, deleted_at="2026-11-25T00:00:00Z")).kind == REFUSED_UNLESS_DELETED


@pytest.mark.parametrize(
    ("status", "body"),
    [(204, None), (404, {"code": "not_found"}), (410, {"code": "gone"}), (410, {"code": "id_expired"})],
)
def test_a_delete_is_confirmed_by_cluster_svcs_own_answer(status, body):
    change = judged(CLUSTER, body, status=status, operation=Operation.DELETE, deleted_at="2026-11-25T00:00:00Z")
    assert change.kind == DELETE_CONFIRMED


@pytest.mark.parametrize(("status", "body"), [(404, None), (404, "<html>Not Found</html>"), (410, {"code": "other"})])
def test_a_delete_answered_by_something_else_proves_nothing(status, body):
    change = judged(CLUSTER, body, status=status, operation=Operation.DELETE, deleted_at="2026-11-25T00:00:00Z")
    assert change.kind == RETRY_LATER and "proves nothing" in change.reason


def test_repair_never_moves_a_row_past_the_highest_generation():
    """Repair's ``ahead`` moves the platform's generation past cluster_svc's: at the integer's limit it
    fails the row with that reason instead (an UPDATE past it would raise at every periodic pass)."""
    from platform_svc.operations.repair import _past_theirs

    theirs = {"generation": HIGHEST_GENERATION, "fields": copy(CLUSTER)}
    changes = _past_theirs(CLUSTER, row(CLUSTER), "ahead", theirs)
    assert "generation" not in changes and "highest" in changes["sync_error"] and "sync_failed_at" in changes
    passed = _past_theirs(CLUSTER, row(CLUSTER), "ahead", {**theirs, "generation": HIGHEST_GENERATION - 1})
    assert passed["generation"] == HIGHEST_GENERATION
