"""platform_svc's public routes, built for every registered resource. Views own the transactions: the intent is
committed in one, then pushed down, and the outcome recorded in another."""
from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from flask import Response, current_app, g, request
from flask.views import MethodView
from sqlalchemy import Connection
from sqlalchemy.engine import RowMapping

from platform_svc.api import services, waiting
from platform_svc.models import RESOURCES
from platform_svc.schemas import IDEMPOTENCY_KEY_PATTERN, ListArgs, route_schemas
from platform_svc.states import IDEMPOTENCY_STATUS, SyncState
from shared.api import Blueprint, created_location, documented, no_content, unchanged
from shared.coalesce import Coalescer
from shared.db import transaction
from shared.errors import database_unavailable
from shared.horizon import Horizon
from shared.idempotent import CreateResult
from shared.openapi import IDEMPOTENT_REPLAYED, LOCATION
from shared.registry import Registry, Resource

INTENTS_PER_FLUSH = 100
NO_LEASE = timedelta(0)  # while the breaker is open: committed without a lease, the reconciler's at once
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    # 1-255 printable ASCII characters; none at either end, where HTTP trims whitespace.
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN, "maxLength": 255},
    "description": (
        "Makes the create safe to retry (IETF draft 'The Idempotency-Key HTTP Header Field'): "
        "the same key and body again answer 200 with the object as it is now (Idempotent-Replayed: true), "
        "also while the first request is still in flight; the same key with another body: 422 "
        "idempotency_key_reused; the key of an object since deleted: 410. Keys are scoped to your account and "
        "the kind of object: the same key sent to two kinds of object makes one of each. "
        "Expiry policy: a key lives exactly as long as the object it created, since it is stored on that "
        "object's row. Once the object is deleted, and its ID is older than the ID horizon "
        "(ID_HORIZON_SECONDS, 30 days by default), the deleted object is purged and the key is free again. "
        "A caller that lost the answer finds what its key created with GET on the collection and "
        "?idempotency_key=<key>. "
        "One key per request: the header sent more than once is a 400 invalid_idempotency_key (a single "
        "key may contain commas; a proxy that joins repeated header lines into one hides the repeat)."
    ),
}
INVALID_KEY = (
    "Malformed request or JSON, or an Idempotency-Key that is not 1-255 printable ASCII characters"
    " or was sent more than once (invalid_idempotency_key)"
)
KEY_REUSED = "Invalid body (validation_error), or the Idempotency-Key was used with another body (idempotency_key_reused)"
EXPIRED_OR_GONE = "Deleted (gone), or no such object and an ID older than the horizon: purged, or never made (id_expired)"
IDEMPOTENCY_STATUS_HEADER = {
    "description": "How far the object got: processing while cluster_svc has not confirmed its current "
    "generation (sync_state pending), completed once it has (synced), failed when it failed for good "
    "(sync_state failed; sync_error says why)",
    "schema": {"type": "string", "enum": sorted(set(IDEMPOTENCY_STATUS.values()))},
}
STATUS_HEADERS = {"Idempotency-Status": IDEMPOTENCY_STATUS_HEADER}
RECOVERED_HEADERS = {"Idempotency-Status": {
    **IDEMPOTENCY_STATUS_HEADER,
    "description": "With idempotency_key, when it found the object: " + IDEMPOTENCY_STATUS_HEADER["description"],
}}
PREFER = {
    "name": "Prefer",
    "in": "header",
    "required": False,
    "description": f"wait=N (RFC 7240): answer once the object is completed or failed (Idempotency-Status), or after"
    f" N seconds (at most {waiting.MAX_WAIT}), whichever comes first; the answer then says Preference-Applied."
    " Waiting holds no database connection. Any other preference is ignored, as RFC 7240 says.",
    "schema": {"type": "string"},
}
WRITE_HEADERS = {
    **STATUS_HEADERS,
    "Preference-Applied": {
        "description": "wait=N when the request's Prefer: wait=N was honoured (N capped)",
        "schema": {"type": "string", "pattern": "^wait=[0-9]+$"},
    },
}
CREATED_HEADERS = {"Location": LOCATION, **WRITE_HEADERS}
REPLAYED_HEADERS = {"Location": LOCATION, "Idempotent-Replayed": IDEMPOTENT_REPLAYED, **WRITE_HEADERS}


def idempotency_key() -> str | None:
    """:raise InvalidIdempotencyKey: not 1-255 printable ASCII characters, or sent more than once."""
    return services.check_idempotency_key(request.headers.get("Idempotency-Key"), request.environ)


def inline_lease() -> timedelta:
    """How long a public write's row is leased to its inline push (``INLINE_LEASE_SECONDS``): long
    enough for the push with its quick retries; if this process dies first, the lease runs out
    and the reconciler takes over."""
    return current_app.extensions["inline_lease"]


def pusher():
    return current_app.extensions["pusher"]


def answered(row: RowMapping) -> RowMapping:
    """``row`` as the object the answer is about: its ``Idempotency-Status`` goes with the answer."""
    g.idempotency_status = IDEMPOTENCY_STATUS[row["sync_state"]]
    return row


def written(resource: Resource, row: RowMapping) -> tuple[RowMapping, dict[str, str]]:
    """What a write answers: ``row``, once it settled when the request asked to wait for it
    (``Prefer: wait=N``, :mod:`platform_svc.api.waiting`), with the header saying so, and its
    ``Idempotency-Status`` (:func:`answered`)."""
    seconds = waiting.preferred_wait(request.headers.getlist("Prefer"))
    if seconds is None:
        return answered(row), {}
    row = waiting.wait_for_outcome(current_app.extensions["database"], resource, row, seconds)
    return answered(row), waiting.applied(seconds)


def add_idempotency_status(response: Response) -> Response:
    status = g.pop("idempotency_status", None)
    if status is not None:
        response.headers["Idempotency-Status"] = status
    return response


def horizon() -> Horizon:
    """The app's UUIDv7 horizon (``ID_HORIZON_SECONDS``)."""
    return current_app.extensions["horizon"]


def create_and_push(resource: Resource, values: dict[str, Any]) -> tuple[RowMapping, int, dict[str, str]]:
    """Commit the new row (with its lease), then push it at once; 200 for a key replay.

    While the circuit breaker is open the row is committed without a lease and
    answered ``pending`` at once: one statement, no call to cluster_svc.
    """
    key = idempotency_key()
    pushing = not pusher().holding_off
    lease = inline_lease() if pushing else NO_LEASE
    if key is None:
        row, created = intents(resource, lease).submit(values).unwrap()
    else:
        with transaction() as db_session:
            row, created = services.create_object(
                db_session=db_session, resource=resource, values=values, idempotency_key=key, lease=lease,
                horizon=horizon(), clock=current_app.extensions["clock"],
            )
    if not created:  # counted like any request: it costs the server a read
        row, preference = written(resource, row)
        return row, 200, {
            "Location": created_location(row["id"]), "Idempotent-Replayed": "true", **preference,
        }
    if pushing and row["sync_state"] != SyncState.FAILED:  # failed at once: under a parent that failed for good
        row = pusher().push_now(resource, row)  # never raises: the intent is committed
    row, preference = written(resource, row)
    return row, 201, {"Location": created_location(row["id"]), **preference}


def intents(resource: Resource, lease: timedelta) -> Coalescer[dict[str, Any], CreateResult]:
    """This app's public creates of ``resource`` without an Idempotency-Key in flight in this
    worker, with this lease: each flush records them with one INSERT and one commit
    (:mod:`shared.coalesce`). A database that cannot serve it fails the flush's
    requests (503: nothing was committed); any other failure of a shared flush
    sends its items again one by one."""
    coalescers = current_app.extensions.setdefault("intents", {})
    if (resource.key, lease) not in coalescers:
        coalescers[resource.key, lease] = Coalescer(
            functools.partial(_record_intents, current_app.extensions["database"], resource, lease),
            max_items=INTENTS_PER_FLUSH,
            alone_on=lambda error: not database_unavailable(error),
        )
    return coalescers[resource.key, lease]


def _record_intents(database, resource: Resource, lease: timedelta, items: list[dict[str, Any]]) -> list[CreateResult]:
    with database.begin() as db_session:
        return services.create_objects(
            db_session=db_session, resource=resource, items=items, lease=lease, horizon=horizon(),
            clock=current_app.extensions["clock"],
        )


def claim_for_push(resource: Resource, row: RowMapping, db_session: Connection) -> RowMapping | None:
    """Within the caller's transaction: take the lease if free (else the reconciler pushes)."""
    return services.claim(db_session=db_session, resource=resource, object_id=row["id"], lease=inline_lease())


def push_if_claimed(resource: Resource, row: RowMapping, claimed: RowMapping | None) -> RowMapping:
    return pusher().push_now(resource, claimed) if claimed is not None else row


def deleted_answer(row: RowMapping, schema, headers: dict[str, str]) -> Response | tuple[Any, int, dict[str, str]]:
    """204 once cluster_svc confirmed the delete; 202 (with the object) while it is being pushed."""
    if row["sync_state"] == SyncState.SYNCED:
        answer = no_content()
        answer.headers.update(headers)
        return answer
    return schema.dump(row), 202, headers


def blueprint(registry: Registry = RESOURCES) -> Blueprint:
    """The public routes of every resource in ``registry``, on a blueprint of its own (one per app)."""
    served = " and ".join(f"{resource.words}s" for resource in registry)
    blp = Blueprint("public", __name__, url_prefix="/v1", description=f"{served.capitalize()} of your account")
    blp.after_request(add_idempotency_status)
    for resource in registry:
        _collection_routes(blp, resource)
        _item_routes(blp, resource)
    return blp


def _collection_routes(blp: Blueprint, resource: Resource) -> None:
    schemas, words, parent = route_schemas(resource), resource.words, resource.parent
    no_parent = f"No such {parent.words} in your account" if parent else None

    class Collection(MethodView):
        @blp.arguments(ListArgs(), location="query")
        @blp.response(200, schemas["page"], headers=RECOVERED_HEADERS)
        @(blp.problem(404, no_parent) if parent else unchanged)
        @(blp.problem(410, f"The {parent.words} was deleted (gone), or has no row and an ID older than the "
                      "horizon (id_expired)") if parent else unchanged)
        @documented(
            (f"List your live {words}s, oldest first." if parent is None
             else f"List a {parent.words}'s live {words}s.")
            + "\n\nWith idempotency_key, only the one a create with that Idempotency-Key made (or none): "
            "the recovery route for a lost answer."
        )
        def get(self, args, **path_ids):
            scope = resource.scope_from_path(path_ids)
            with transaction() as db_session:
                if parent is not None:
                    own_parent(db_session, resource, scope)
                items, next_after = services.list_objects(
                    db_session=db_session, resource=resource, filters={**scope, "account_id": g.principal}, **args
                )
            if args.get("idempotency_key") is not None and items:  # the recovery route: one object
                answered(items[0])
            return {"items": items, "next_after": next_after}

        @blp.arguments(schemas["create"]())
        @blp.doc(parameters=[IDEMPOTENCY_KEY, PREFER])
        @blp.response(
            201, schemas["out"], description="Created (sync_state tells whether cluster_svc has it yet)",
            headers=CREATED_HEADERS,
        )
        @blp.alt_response(
            200, schema=schemas["out"], description="Replayed with the same Idempotency-Key and body",
            headers=REPLAYED_HEADERS,
        )
        @blp.problem(400, INVALID_KEY)
        @(blp.problem(404, no_parent) if parent else unchanged)
        @blp.problem(
            410,
            f"The {parent.words} was deleted, or the Idempotency-Key belongs to a {words} since deleted (gone); "
            f"or the {parent.words} has no row and an ID older than the horizon (id_expired)"
            if parent else f"The Idempotency-Key belongs to a {words} since deleted (gone)",
        )
        @blp.problem(422, KEY_REUSED)
        @documented(f"Create a {words}; it gets a UUIDv7 and is pushed down to cluster_svc." if parent is None
                    else f"Add a {words}; pushed down once its {parent.words} is.")
        def post(self, body, **path_ids):
            scope = resource.scope_from_path(path_ids)
            if parent is not None:
                # The parent must be this account's (an account never changes, so this
                # may be checked apart); that it is alive is checked by the insert itself.
                with transaction() as db_session:
                    own_parent(db_session, resource, scope)
            return create_and_push(resource, {**body, **scope, "account_id": g.principal})

    blp.route(resource.collection_path(), endpoint=f"{resource.key}_collection")(Collection)


def _item_routes(blp: Blueprint, resource: Resource) -> None:
    schemas, words = route_schemas(resource), resource.words
    out = schemas["out"]()
    mutable = " or ".join(schemas["patch"]().fields)
    under = [child.words + "s" for child in resource.children]

    class Item(MethodView):
        @blp.response(200, schemas["out"], headers=STATUS_HEADERS)
        @blp.problem(404, f"No such {words} in your account")
        @blp.problem(410, EXPIRED_OR_GONE)
        @documented(f"Get a {words} with its sync state.")
        def get(self, **path_ids):
            object_id, scope = path_ids[resource.path_variable], resource.scope_from_path(path_ids)
            with transaction() as db_session:
                return answered(services.get_object(
                    db_session=db_session, resource=resource, account_id=g.principal, object_id=object_id,
                    horizon=horizon(), **scope
                ))

        @blp.arguments(schemas["patch"](partial=True))
        @blp.doc(parameters=[PREFER])
        @blp.response(200, schemas["out"], headers=WRITE_HEADERS)
        @blp.problem(404, f"No such {words} in your account")
        @blp.problem(409, "The object is at the highest generation there is (generation_exhausted): it cannot be"
                     " changed any more")
        @blp.problem(410, EXPIRED_OR_GONE)
        @documented(f"Change a {words}'s {mutable}; bumps the generation and pushes it down.")
        def patch(self, changes, **path_ids):
            object_id, scope = path_ids[resource.path_variable], resource.scope_from_path(path_ids)
            with transaction() as db_session:
                row = services.update_object(
                    db_session=db_session, resource=resource, account_id=g.principal, object_id=object_id,
                    changes=changes, horizon=horizon(), **scope,
                )
                claimed = claim_for_push(resource, row, db_session)
            row, preference = written(resource, push_if_claimed(resource, row, claimed))
            return row, 200, preference

        @blp.doc(parameters=[PREFER])
        @blp.response(204, description="Deleted, and cluster_svc confirmed it", headers=WRITE_HEADERS)
        @blp.alt_response(202, schema=schemas["out"], description="Deleted; still being pushed down",
                          headers=WRITE_HEADERS)
        @blp.problem(404, f"No such {words} in your account")
        @blp.problem(410, "Already deleted (gone), or no such object and an ID older than the horizon (id_expired)")
        @documented(f"Delete a {words}" + (f" and its {' and '.join(under)}." if under else "."))
        def delete(self, **path_ids):
            object_id, scope = path_ids[resource.path_variable], resource.scope_from_path(path_ids)
            with transaction() as db_session:
                row = services.delete_object(
                    db_session=db_session, resource=resource, account_id=g.principal, object_id=object_id,
                    horizon=horizon(), **scope
                )
                claimed = claim_for_push(resource, row, db_session)
            row, preference = written(resource, push_if_claimed(resource, row, claimed))
            return deleted_answer(row, out, preference)

    blp.route(resource.item_path(), endpoint=resource.key)(Item)


def own_parent(db_session: Connection, resource: Resource, scope: dict[str, Any]) -> RowMapping:
    """The parent ``scope`` names, if it is this account's and lies under the ancestors ``scope`` names.

    :raise NotFound: not this account's (or no such parent). :raise Gone: deleted.
    """
    parent = resource.parent
    return services.get_object(
        db_session=db_session,
        resource=parent,
        account_id=g.principal,
        object_id=scope[parent.id_column],
        horizon=horizon(),
        **{column: scope[column] for column in parent.scope_columns},
    )
