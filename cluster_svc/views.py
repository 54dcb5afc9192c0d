"""cluster_svc's HTTP routes. Views translate; services decide.

The helpers that turn a service's result into an answer are also where the
idempotency outcomes are counted (``idempotent_*_total``), once each.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flask import Response
from flask.views import MethodView
from marshmallow import Schema, ValidationError
from sqlalchemy import Connection

from cluster_svc import services
from cluster_svc.schemas import (
    MAX_BATCH_ITEMS,
    ClusterBatchCreate,
    ClusterBatchResults,
    ClusterCreate,
    ClusterListArgs,
    ClusterOut,
    ClusterPage,
    ClusterUpdate,
    FirewallRuleBatchCreate,
    FirewallRuleBatchResults,
    FirewallRuleCreate,
    FirewallRuleListArgs,
    FirewallRuleListedPage,
    FirewallRuleOut,
    FirewallRulePage,
    FirewallRuleUpdate,
)
from shared.api import Blueprint, created_location, no_content
from shared.counters import count_create, count_delete, count_update
from shared.db import transaction
from shared.errors import Gone, IdConflict, PayloadTooLarge, ValidationFailed, problem
from shared.idempotent import CreateResult, Deletion
from shared.openapi import IDEMPOTENT_REPLAYED, LOCATION
from shared.schemas import PageArgs

blp = Blueprint("clusters", __name__, url_prefix="/v1", description="Clusters and their firewall rules")

REPLAYED = {"Idempotent-Replayed": "true"}
CREATED_HEADERS = {"Location": LOCATION}
REPLAYED_HEADERS = {"Location": LOCATION, "Idempotent-Replayed": IDEMPOTENT_REPLAYED}

# The single creates' schemas, loading each batch item.
CLUSTER_CREATE = ClusterCreate()
RULE_CREATE = FirewallRuleCreate()
CLUSTER, FIREWALL_RULE = "cluster", "firewall_rule"  # the metrics' resource labels
# A missing parent (not_found) is no idempotency outcome: the single create does not count it either.
COUNTED_CREATE_OUTCOMES = frozenset({"created", "replayed", "conflict", "gone"})


def create_answer(
    resource: str, create: Callable[[Connection], tuple[Any, bool]]
) -> tuple[Any, int, dict[str, str]]:
    """Run ``create`` in its own transaction; count its outcome and answer it.

    :raise IdConflict, Gone: as ``create`` does (counted as conflict and gone).
    """
    try:
        with transaction() as db_session:
            row, created = create(db_session)
    except IdConflict:
        count_create(resource, "conflict")
        raise
    except Gone:
        count_create(resource, "gone")
        raise
    count_create(resource, "created" if created else "replayed")
    return created_or_replayed(row, created)


def created_or_replayed(row: Any, created: bool) -> tuple[Any, int, dict[str, str]]:
    """201 with Location for a new object; 200 and Idempotent-Replayed for a replay."""
    headers = {"Location": created_location(row["id"])}
    return (row, 201, headers) if created else (row, 200, {**headers, **REPLAYED})


def updated(resource: str, row: Any, applied: bool) -> Any:
    """The current state, whether the update applied or was stale (counted as such)."""
    count_update(resource, "applied" if applied else "stale")
    return row


def deleted(resource: str, outcome: Deletion, what: str) -> Response:
    """204 the first time; 410 after; 404 (tombstone recorded) for an ID never seen."""
    count_delete(resource, outcome.value)
    if outcome is Deletion.DELETED:
        return no_content()
    if outcome is Deletion.ALREADY_DELETED:
        raise Gone(f"{what} was already deleted.")
    # The view's transaction has committed the new tombstone; this is an answer, not a failure.
    return problem(404, "not_found", f"{what} does not exist; its ID is now reserved as deleted.")


def batch_created_or_returned(
    resource: str, items: Sequence[Any], schema: Schema, create_many: Callable[..., list[CreateResult]]
) -> dict[str, list[dict[str, Any]]]:
    """Validate each item on its own, create-or-return the valid ones in one
    transaction, and answer one result per item in order (each item counted
    as its single create would be).

    Each item is loaded by the schema of the single create (without webargs'
    per-request machinery) and an invalid one answers the very problem its
    single create would, in its place.
    """
    if len(items) > MAX_BATCH_ITEMS:
        raise PayloadTooLarge(f"A batch holds at most {MAX_BATCH_ITEMS:,} items; this one has {len(items):,}.")
    results: list[dict[str, Any] | None] = [None] * len(items)
    valid: list[tuple[int, dict[str, Any]]] = []
    for index, item in enumerate(items):
        try:
            valid.append((index, schema.load(item)))
        except ValidationError as error:
            results[index] = {"status": 422, "problem": ValidationFailed({"json": error.messages}).body()}
    if valid:
        with transaction() as db_session:
            created = create_many(db_session, [values for _, values in valid])
        for (index, _), result in zip(valid, created):
            if result.outcome.value in COUNTED_CREATE_OUTCOMES:
                count_create(resource, result.outcome.value)
            if result.error is None:
                results[index] = {"status": result.status, "object": result.row}
            else:
                results[index] = {"status": result.status, "problem": result.error.body()}
    return {"results": results}


@blp.route("/clusters")
class Clusters(MethodView):
    @blp.arguments(ClusterListArgs(), location="query")
    @blp.response(200, ClusterPage)
    @blp.problem(401, "No valid internal token")
    def get(self, args):
        """List live clusters in id order (keyset pagination); with include_deleted, tombstones too."""
        with transaction() as db_session:
            items, next_after = services.list_clusters(db_session=db_session, **args)
        return {"items": items, "next_after": next_after}

    @blp.arguments(ClusterCreate())
    @blp.response(201, ClusterOut, description="Created", headers=CREATED_HEADERS)
    @blp.alt_response(
        200, schema=ClusterOut, description="Already existed (Idempotent-Replayed: true)", headers=REPLAYED_HEADERS
    )
    @blp.problem(409, "The ID exists with different immutable fields (id_conflict)")
    @blp.problem(410, "The ID was deleted (gone)")
    def post(self, cluster_in):
        """Create a cluster with the caller's ID, or return the one that has it."""
        return create_answer(
            CLUSTER, lambda db_session: services.create_cluster(db_session=db_session, cluster_in=cluster_in)
        )


@blp.route("/clusters/batch")
class ClusterBatch(MethodView):
    @blp.arguments(ClusterBatchCreate())
    @blp.response(200, ClusterBatchResults, description="One result per item, in order")
    @blp.problem(413, "More than 1,000 items (payload_too_large)")
    def post(self, batch):
        """Create or return up to 1,000 clusters at once.

        One transaction: one INSERT for the new items, one read for those that
        existed. Each item answers what its single create would have, in order;
        one bad item never fails the others. An ID repeated within the batch is
        decided by its first occurrence: identical repeats answer 200,
        conflicting ones 409.
        """
        return batch_created_or_returned(
            CLUSTER,
            batch["items"],
            CLUSTER_CREATE,
            lambda db_session, items: services.create_clusters(db_session=db_session, clusters_in=items),
        )


@blp.route("/firewall-rules")
class AllFirewallRules(MethodView):
    @blp.arguments(FirewallRuleListArgs(), location="query")
    @blp.response(200, FirewallRuleListedPage)
    @blp.problem(401, "No valid internal token")
    def get(self, args):
        """List every cluster's firewall rules in one id order (keyset pagination), each with its team.

        For callers that compare their records with these, such as platform_svc's
        drift repair; with include_deleted, tombstones too."""
        with transaction() as db_session:
            items, next_after = services.list_all_firewall_rules(db_session=db_session, **args)
        return {"items": items, "next_after": next_after}


@blp.route("/clusters/<object_id:cluster_id>")
class Cluster(MethodView):
    @blp.response(200, ClusterOut)
    @blp.problem(404, "Never existed")
    @blp.problem(410, "Deleted")
    def get(self, cluster_id):
        """Get a cluster."""
        with transaction() as db_session:
            return services.get_cluster(db_session=db_session, cluster_id=cluster_id)

    @blp.arguments(ClusterUpdate())
    @blp.response(200, ClusterOut, description="The current state, whether applied or stale")
    @blp.problem(404, "Never existed")
    @blp.problem(410, "Deleted")
    def put(self, cluster_in, cluster_id):
        """Update a cluster's mutable fields if the generation is newer than the stored one."""
        with transaction() as db_session:
            row, applied = services.update_cluster(db_session=db_session, cluster_id=cluster_id, cluster_in=cluster_in)
        return updated(CLUSTER, row, applied)

    @blp.response(204, description="Deleted")
    @blp.problem(404, "Never existed; a tombstone is recorded")
    @blp.problem(410, "Already deleted")
    def delete(self, cluster_id):
        """Delete a cluster and its firewall rules (soft delete; the ID stays taken)."""
        with transaction() as db_session:
            outcome = services.delete_cluster(db_session=db_session, cluster_id=cluster_id)
        return deleted(CLUSTER, outcome, f"Cluster {cluster_id}")


@blp.route("/clusters/<object_id:cluster_id>/firewall-rules")
class FirewallRules(MethodView):
    @blp.arguments(PageArgs(), location="query")
    @blp.response(200, FirewallRulePage)
    @blp.problem(404, "No such cluster")
    @blp.problem(410, "The cluster was deleted")
    def get(self, args, cluster_id):
        """List a cluster's live firewall rules in id order."""
        with transaction() as db_session:
            items, next_after = services.list_firewall_rules(db_session=db_session, cluster_id=cluster_id, **args)
        return {"items": items, "next_after": next_after}

    @blp.arguments(FirewallRuleCreate())
    @blp.response(201, FirewallRuleOut, description="Created", headers=CREATED_HEADERS)
    @blp.alt_response(
        200, schema=FirewallRuleOut, description="Already existed (Idempotent-Replayed: true)", headers=REPLAYED_HEADERS
    )
    @blp.problem(404, "No such cluster")
    @blp.problem(409, "The ID exists with a different cluster or CIDR (id_conflict)")
    @blp.problem(410, "The rule or its cluster was deleted (gone)")
    def post(self, rule_in, cluster_id):
        """Create a firewall rule with the caller's ID, or return the one that has it."""
        return create_answer(
            FIREWALL_RULE,
            lambda db_session: services.create_firewall_rule(
                db_session=db_session, cluster_id=cluster_id, rule_in=rule_in
            ),
        )


@blp.route("/clusters/<object_id:cluster_id>/firewall-rules/batch")
class FirewallRuleBatch(MethodView):
    @blp.arguments(FirewallRuleBatchCreate())
    @blp.response(200, FirewallRuleBatchResults, description="One result per item, in order")
    @blp.problem(413, "More than 1,000 items (payload_too_large)")
    def post(self, batch, cluster_id):
        """Create or return up to 1,000 firewall rules of one cluster at once.

        The same as a cluster batch. A missing or deleted cluster is answered
        item by item (404 or 410 for each new rule), as each single create
        would answer it.
        """
        return batch_created_or_returned(
            FIREWALL_RULE,
            batch["items"],
            RULE_CREATE,
            lambda db_session, items: services.create_firewall_rules(
                db_session=db_session, cluster_id=cluster_id, rules_in=items
            ),
        )


@blp.route("/clusters/<object_id:cluster_id>/firewall-rules/<object_id:rule_id>")
class FirewallRule(MethodView):
    @blp.response(200, FirewallRuleOut)
    @blp.problem(404, "Never existed")
    @blp.problem(410, "Deleted, or its cluster was")
    def get(self, cluster_id, rule_id):
        """Get a firewall rule."""
        with transaction() as db_session:
            return services.get_firewall_rule(db_session=db_session, cluster_id=cluster_id, rule_id=rule_id)

    @blp.arguments(FirewallRuleUpdate())
    @blp.response(200, FirewallRuleOut, description="The current state, whether applied or stale")
    @blp.problem(404, "Never existed")
    @blp.problem(410, "Deleted")
    def put(self, rule_in, cluster_id, rule_id):
        """Update a rule's description if the generation is newer than the stored one."""
        with transaction() as db_session:
            row, applied = services.update_firewall_rule(
                db_session=db_session, cluster_id=cluster_id, rule_id=rule_id, rule_in=rule_in
            )
        return updated(FIREWALL_RULE, row, applied)

    @blp.response(204, description="Deleted")
    @blp.problem(404, "Never existed (a tombstone is recorded), or no such cluster")
    @blp.problem(410, "Already deleted")
    def delete(self, cluster_id, rule_id):
        """Delete a firewall rule (soft delete; the ID stays taken)."""
        with transaction() as db_session:
            outcome = services.delete_firewall_rule(db_session=db_session, cluster_id=cluster_id, rule_id=rule_id)
        return deleted(FIREWALL_RULE, outcome, f"Firewall rule {rule_id}")
