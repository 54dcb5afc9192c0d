"""platform_svc's public routes, built for every registered resource. A view parses the request and
answers; a write's step (validate, commit, push inline, record) is :mod:`platform_svc.api.writes`'s."""
from __future__ import annotations

from typing import Any

from flask import Response, current_app, g, request
from flask.views import MethodView
from sqlalchemy.engine import RowMapping

from platform_svc.api import services, waiting
from platform_svc.api.writes import Writes, Written
from platform_svc.models import RESOURCES
from platform_svc.schemas import IDEMPOTENCY_KEY_PATTERN, ListArgs, route_schemas
from platform_svc.states import IDEMPOTENCY_STATUS, SyncState
from shared.api import Blueprint, created_location, documented, no_content, unchanged
from shared.db import transaction
from shared.horizon import Horizon
from shared.openapi import IDEMPOTENT_REPLAYED, LOCATION
from shared.registry import Registry, Resource

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


def preferred_wait() -> int | None:
    """The seconds the request's ``Prefer: wait=N`` asks a write to wait for its outcome (capped), if any."""
    return waiting.preferred_wait(request.headers.getlist("Prefer"))


def writes() -> Writes:
    """This app's write step (:mod:`platform_svc.api.writes`)."""
    return current_app.extensions["writes"]


def horizon() -> Horizon:
    """The app's UUIDv7 horizon (``ID_HORIZON_SECONDS``)."""
    return writes().horizon


def answered(row: RowMapping) -> RowMapping:
    """``row`` as the object the answer is about: its ``Idempotency-Status`` goes with the answer."""
    g.idempotency_status = IDEMPOTENCY_STATUS[row["sync_state"]]
    return row


def answer_headers(written: Written) -> dict[str, str]:
    """The headers a write's answer carries beside its ``Idempotency-Status`` (:func:`answered`)."""
    return {} if written.waited is None else waiting.applied(written.waited)


def add_idempotency_status(response: Response) -> Response:
    status = g.pop("idempotency_status", None)
    if status is not None:
        response.headers["Idempotency-Status"] = status
    return response


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
                    services.own_parent(
                        db_session=db_session, resource=resource, account_id=g.principal, scope=scope, horizon=horizon()
                    )
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
            written = writes().create(
                resource, body, account_id=g.principal, scope=resource.scope_from_path(path_ids),
                idempotency_key=idempotency_key(), wait=preferred_wait(),
            )
            headers = {"Location": created_location(written.row["id"]), **answer_headers(written)}
            if not written.created:
                headers["Idempotent-Replayed"] = "true"
            return answered(written.row), 201 if written.created else 200, headers

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
            written = writes().update(
                resource, changes, account_id=g.principal, object_id=path_ids[resource.path_variable],
                scope=resource.scope_from_path(path_ids), wait=preferred_wait(),
            )
            return answered(written.row), 200, answer_headers(written)

        @blp.doc(parameters=[PREFER])
        @blp.response(204, description="Deleted, and cluster_svc confirmed it", headers=WRITE_HEADERS)
        @blp.alt_response(202, schema=schemas["out"], description="Deleted; still being pushed down",
                          headers=WRITE_HEADERS)
        @blp.problem(404, f"No such {words} in your account")
        @blp.problem(410, "Already deleted (gone), or no such object and an ID older than the horizon (id_expired)")
        @documented(f"Delete a {words}" + (f" and its {' and '.join(under)}." if under else "."))
        def delete(self, **path_ids):
            written = writes().delete(
                resource, account_id=g.principal, object_id=path_ids[resource.path_variable],
                scope=resource.scope_from_path(path_ids), wait=preferred_wait(),
            )
            return deleted_answer(answered(written.row), out, answer_headers(written))

    blp.route(resource.item_path(), endpoint=resource.key)(Item)
