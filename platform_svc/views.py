"""platform_svc's public routes. Views own the transactions: the intent is
committed in one, then pushed down, and the outcome recorded in another."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import Response, current_app, g, request
from flask.views import MethodView
from sqlalchemy import Connection
from sqlalchemy.engine import RowMapping

from platform_svc import inline_lease, services
from platform_svc.schemas import (
    ClusterCreate,
    ClusterOut,
    ClusterPage,
    ClusterPatch,
    FirewallRuleCreate,
    FirewallRuleOut,
    FirewallRulePage,
    FirewallRulePatch,
)
from platform_svc.sync import CLUSTER, FIREWALL_RULE, Kind
from shared.api import Blueprint, created_location, no_content
from shared.db import transaction
from shared.openapi import IDEMPOTENT_REPLAYED, LOCATION
from shared.schemas import PageArgs

blp = Blueprint("public", __name__, url_prefix="/v1", description="Clusters and firewall rules of your account")

# Long enough for the inline push with its quick retries; if this process dies
# first, the lease runs out and the reconciler takes over.
INLINE_LEASE = inline_lease()
NO_LEASE = timedelta(0)
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    # 1-255 printable ASCII characters; none at either end, where HTTP trims whitespace.
    "schema": {"type": "string", "pattern": "^[!-~]([ -~]{0,253}[!-~])?$", "maxLength": 255},
    "description": (
        "Makes the create safe to retry (IETF draft 'The Idempotency-Key HTTP Header Field'): "
        "the same key and body again answer 200 with the object as it is now (Idempotent-Replayed: true), "
        "also while the first request is still in flight; the same key with another body: 422 "
        "idempotency_key_reused; the key of an object since deleted: 410. Keys are scoped to your account."
    ),
}
INVALID_KEY = "Malformed request or JSON, or an Idempotency-Key that is not 1-255 printable ASCII characters (invalid_idempotency_key)"
KEY_REUSED = "Invalid body (validation_error), or the Idempotency-Key was used with another body (idempotency_key_reused)"
CREATED_HEADERS = {"Location": LOCATION}
REPLAYED_HEADERS = {"Location": LOCATION, "Idempotent-Replayed": IDEMPOTENT_REPLAYED}


def idempotency_key() -> str | None:
    """:raise InvalidIdempotencyKey: not 1-255 printable ASCII characters."""
    return services.check_idempotency_key(request.headers.get("Idempotency-Key"))


def pusher():
    return current_app.extensions["pusher"]


def create_and_push(kind: Kind, values: dict[str, Any]) -> tuple[RowMapping, int, dict[str, str]]:
    """Commit the new row (with its lease), then push it at once; 200 for a key replay.

    While the circuit breaker is open the row is committed without a lease and
    answered ``pending`` at once: one statement, no call to cluster_svc.
    """
    key = idempotency_key()
    pushing = not pusher().holding_off
    with transaction() as db_session:
        row, created = services.create_object(
            db_session=db_session,
            resource=kind.resource,
            values=values,
            idempotency_key=key,
            lease=INLINE_LEASE if pushing else NO_LEASE,
        )
    if not created:
        return row, 200, {"Location": created_location(row["id"]), "Idempotent-Replayed": "true"}
    if pushing:
        row = pusher().push_now(kind, row)  # never raises: the intent is committed
    return row, 201, {"Location": created_location(row["id"])}


def claim_for_push(kind: Kind, row: RowMapping, db_session: Connection) -> RowMapping | None:
    """Within the caller's transaction: take the lease if free (else the reconciler pushes)."""
    return services.claim(db_session=db_session, resource=kind.resource, object_id=row["id"], lease=INLINE_LEASE)


def push_if_claimed(kind: Kind, row: RowMapping, claimed: RowMapping | None) -> RowMapping:
    return pusher().push_now(kind, claimed) if claimed is not None else row


def deleted_answer(row: RowMapping, schema) -> Response | tuple[Any, int]:
    """204 once cluster_svc confirmed the delete; 202 (with the object) while it is being pushed."""
    if row["sync_state"] == "synced":
        return no_content()
    return schema.dump(row), 202


@blp.route("/clusters")
class Clusters(MethodView):
    @blp.arguments(PageArgs(), location="query")
    @blp.response(200, ClusterPage)
    def get(self, args):
        """List your live clusters, oldest first."""
        with transaction() as db_session:
            items, next_after = services.list_objects(
                db_session=db_session, resource=CLUSTER.resource, filters={"account_id": g.principal}, **args
            )
        return {"items": items, "next_after": next_after}

    @blp.arguments(ClusterCreate())
    @blp.doc(parameters=[IDEMPOTENCY_KEY])
    @blp.response(
        201, ClusterOut, description="Created (sync_state tells whether cluster_svc has it yet)", headers=CREATED_HEADERS
    )
    @blp.alt_response(
        200, schema=ClusterOut, description="Replayed with the same Idempotency-Key and body", headers=REPLAYED_HEADERS
    )
    @blp.problem(400, INVALID_KEY)
    @blp.problem(410, "The Idempotency-Key belongs to a cluster since deleted (gone)")
    @blp.problem(422, KEY_REUSED)
    def post(self, cluster_in):
        """Create a cluster; it gets a UUIDv7 and is pushed down to cluster_svc."""
        values = {**cluster_in, "account_id": g.principal}
        return create_and_push(CLUSTER, values)


@blp.route("/clusters/<object_id:cluster_id>")
class Cluster(MethodView):
    @blp.response(200, ClusterOut)
    @blp.problem(404, "No such cluster in your account")
    @blp.problem(410, "Deleted")
    def get(self, cluster_id):
        """Get a cluster with its sync state."""
        with transaction() as db_session:
            return services.get_object(
                db_session=db_session, resource=CLUSTER.resource, account_id=g.principal, object_id=cluster_id
            )

    @blp.arguments(ClusterPatch(partial=True))
    @blp.response(200, ClusterOut)
    @blp.problem(404, "No such cluster in your account")
    @blp.problem(410, "Deleted")
    def patch(self, changes, cluster_id):
        """Change a cluster's name, plan or storage; bumps the generation and pushes it down."""
        with transaction() as db_session:
            row = services.update_object(
                db_session=db_session,
                resource=CLUSTER.resource,
                account_id=g.principal,
                object_id=cluster_id,
                changes=changes,
            )
            claimed = claim_for_push(CLUSTER, row, db_session)
        return push_if_claimed(CLUSTER, row, claimed)

    @blp.response(204, description="Deleted, and cluster_svc confirmed it")
    @blp.alt_response(202, schema=ClusterOut, description="Deleted; still being pushed down")
    @blp.problem(404, "No such cluster in your account")
    @blp.problem(410, "Already deleted")
    def delete(self, cluster_id):
        """Delete a cluster and its firewall rules."""
        with transaction() as db_session:
            row = services.delete_object(
                db_session=db_session, resource=CLUSTER.resource, account_id=g.principal, object_id=cluster_id
            )
            claimed = claim_for_push(CLUSTER, row, db_session)
        return deleted_answer(push_if_claimed(CLUSTER, row, claimed), ClusterOut())


@blp.route("/clusters/<object_id:cluster_id>/firewall-rules")
class FirewallRules(MethodView):
    @blp.arguments(PageArgs(), location="query")
    @blp.response(200, FirewallRulePage)
    @blp.problem(404, "No such cluster in your account")
    @blp.problem(410, "The cluster was deleted")
    def get(self, args, cluster_id):
        """List a cluster's live firewall rules."""
        with transaction() as db_session:
            services.get_object(
                db_session=db_session, resource=CLUSTER.resource, account_id=g.principal, object_id=cluster_id
            )
            items, next_after = services.list_objects(
                db_session=db_session, resource=FIREWALL_RULE.resource, filters={"cluster_id": cluster_id}, **args
            )
        return {"items": items, "next_after": next_after}

    @blp.arguments(FirewallRuleCreate())
    @blp.doc(parameters=[IDEMPOTENCY_KEY])
    @blp.response(201, FirewallRuleOut, description="Created", headers=CREATED_HEADERS)
    @blp.alt_response(
        200, schema=FirewallRuleOut, description="Replayed with the same Idempotency-Key and body", headers=REPLAYED_HEADERS
    )
    @blp.problem(400, INVALID_KEY)
    @blp.problem(404, "No such cluster in your account")
    @blp.problem(410, "The cluster was deleted, or the Idempotency-Key belongs to a rule since deleted (gone)")
    @blp.problem(422, KEY_REUSED)
    def post(self, rule_in, cluster_id):
        """Add a firewall rule; pushed down once its cluster is."""
        # The cluster must be this account's (an account never changes, so this
        # may be checked apart); that it is alive is checked by the insert itself.
        with transaction() as db_session:
            services.get_object(
                db_session=db_session, resource=CLUSTER.resource, account_id=g.principal, object_id=cluster_id
            )
        values = {**rule_in, "cluster_id": cluster_id, "account_id": g.principal}
        return create_and_push(FIREWALL_RULE, values)


@blp.route("/clusters/<object_id:cluster_id>/firewall-rules/<object_id:rule_id>")
class FirewallRule(MethodView):
    @blp.response(200, FirewallRuleOut)
    @blp.problem(404, "No such rule in your account")
    @blp.problem(410, "Deleted")
    def get(self, cluster_id, rule_id):
        """Get a firewall rule with its sync state."""
        with transaction() as db_session:
            return services.get_object(
                db_session=db_session,
                resource=FIREWALL_RULE.resource,
                account_id=g.principal,
                object_id=rule_id,
                cluster_id=cluster_id,
            )

    @blp.arguments(FirewallRulePatch(partial=True))
    @blp.response(200, FirewallRuleOut)
    @blp.problem(404, "No such rule in your account")
    @blp.problem(410, "Deleted")
    def patch(self, changes, cluster_id, rule_id):
        """Change a rule's description; bumps the generation and pushes it down."""
        with transaction() as db_session:
            row = services.update_object(
                db_session=db_session,
                resource=FIREWALL_RULE.resource,
                account_id=g.principal,
                object_id=rule_id,
                changes=changes,
                cluster_id=cluster_id,
            )
            claimed = claim_for_push(FIREWALL_RULE, row, db_session)
        return push_if_claimed(FIREWALL_RULE, row, claimed)

    @blp.response(204, description="Deleted, and cluster_svc confirmed it")
    @blp.alt_response(202, schema=FirewallRuleOut, description="Deleted; still being pushed down")
    @blp.problem(404, "No such rule in your account")
    @blp.problem(410, "Already deleted")
    def delete(self, cluster_id, rule_id):
        """Delete a firewall rule."""
        with transaction() as db_session:
            row = services.delete_object(
                db_session=db_session,
                resource=FIREWALL_RULE.resource,
                account_id=g.principal,
                object_id=rule_id,
                cluster_id=cluster_id,
            )
            claimed = claim_for_push(FIREWALL_RULE, row, db_session)
        return deleted_answer(push_if_claimed(FIREWALL_RULE, row, claimed), FirewallRuleOut())
