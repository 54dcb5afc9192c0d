"""cluster_svc's HTTP routes, built for every registered resource.

:func:`blueprint` gives each resource of :data:`cluster_svc.models.RESOURCES`
the same routes (list, create, batch create, get, put, delete, and for a
child the bulk listing across parents), on the shared create-or-return
mechanism: views translate, :mod:`shared.idempotent` decides, and each
request's transaction is opened and closed here.

The helpers that turn a result into an answer are also where the
idempotency outcomes are counted (``idempotent_*_total``), once each.

Single creates in flight in a worker share one flush (:mod:`shared.coalesce`,
decision 0012): one transaction and one :func:`create_or_return_many` for all
of them, each request answered, counted and logged as its own.

The UUIDv7 horizon applies to every route alike: an ID from more than five
minutes in the future is refused here (422, before anything is read or
stored), and one older than the horizon is decided by the mechanism (410
``id_expired`` where it has no row), with the app's :class:`~shared.horizon.Horizon`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flask import Response, current_app
from flask.views import MethodView
from marshmallow import Schema, ValidationError

from cluster_svc.models import RESOURCES
from cluster_svc.schemas import route_schemas
from shared.api import BATCH, MAX_BATCH_ITEMS, Blueprint, created_location, documented, no_content, unchanged
from shared.coalesce import Coalescer
from shared.counters import CREATE_OUTCOMES, count_create, count_delete, count_update
from shared.db import transaction
from shared.errors import Gone, IdFromTheFuture, PayloadTooLarge, ValidationFailed, database_unavailable, problem
from shared.horizon import Horizon
from shared.idempotent import CreateResult, create_or_return_many
from shared.openapi import IDEMPOTENT_REPLAYED, LOCATION
from shared.registry import Registry, Resource
from shared.rows import Deletion, apply_update, get_live, list_live, mark_deleted

REPLAYED = {"Idempotent-Replayed": "true"}
# Single creates per flush at most (shared.coalesce). Not bounded by bytes: a flush
# goes to PostgreSQL, not over HTTP, and each create's fields are a few KB at most.
COALESCE_MAX_ITEMS = 100
CREATED_HEADERS = {"Location": LOCATION}
REPLAYED_HEADERS = {"Location": LOCATION, "Idempotent-Replayed": IDEMPOTENT_REPLAYED}


def coalesced_creates(resource: Resource) -> Coalescer[dict[str, Any], Any]:
    """The single creates of ``resource`` in flight in this worker, flushed together
    (:mod:`shared.coalesce`): one transaction and one :func:`create_or_return_many` per flush.

    Each item answers what its create alone, in queue order, would have (the
    batch's rule: a repeated ID is decided by its first occurrence). A
    database that cannot serve the flush fails that flush's creates, each a
    503. Any other failure of a shared flush (a value the database refuses)
    is not allowed to spread: its items are created again one by one, each in
    its own transaction.
    """
    return Coalescer(
        lambda items: _create_many(resource, items),
        max_items=COALESCE_MAX_ITEMS,
        alone_on=lambda error: not database_unavailable(error),
    )


def _create_many(resource: Resource, items: Sequence[dict[str, Any]]) -> list[Any]:
    with transaction() as db_session:
        return create_or_return_many(db_session=db_session, resource=resource, items=items, horizon=horizon())


def create_answer(resource: Resource, creates: Coalescer, values: dict[str, Any]) -> tuple[Any, int, dict[str, str]]:
    """Create-or-return ``values`` in the next flush of ``creates``; count its outcome and answer it.

    :raise HttpProblem: the create was refused (409, 410, 404; counted as its outcome).
    """
    result = counted(resource, creates.submit(values))
    row, created = result.unwrap()
    return created_or_replayed(row, created)


def counted(resource: Resource, result: CreateResult) -> CreateResult:
    """Count one create's outcome (each item of a batch counts once); a missing parent
    (not_found) is no idempotency outcome and is not counted."""
    if result.outcome.value in CREATE_OUTCOMES:
        count_create(resource.label, result.outcome.value)
    return result


def created_or_replayed(row: Any, created: bool) -> tuple[Any, int, dict[str, str]]:
    """201 with Location for a new object; 200 and Idempotent-Replayed for a replay."""
    headers = {"Location": created_location(row["id"])}
    return (row, 201, headers) if created else (row, 200, {**headers, **REPLAYED})


def horizon() -> Horizon:
    """The app's UUIDv7 horizon (``ID_HORIZON_SECONDS``)."""
    return current_app.extensions["horizon"]


def refuse_future_ids(ids: Sequence[Any], location: str, field: str | None = None) -> None:
    """A UUIDv7 from more than five minutes ahead would escape the horizon: 422, naming it.

    ``location`` is where the ID came from (``path`` or ``json``); ``field``
    its name there (the ``id`` of a body), else the path says which.

    :raise IdFromTheFuture: (422 ``id_from_the_future``)
    """
    for object_id in ids:
        if horizon().from_the_future(object_id):
            message = horizon().future_refusal()
            raise IdFromTheFuture({location: {field: [message]} if field else [message]})


def updated(resource: Resource, row: Any, applied: bool) -> Any:
    """The current state, whether the update applied or was stale (counted as such)."""
    count_update(resource.label, "applied" if applied else "stale")
    return row


def deleted(resource: Resource, outcome: Deletion, object_id: Any) -> Response:
    """204 the first time; 410 after; 404 (tombstone recorded) for an ID never seen."""
    count_delete(resource.label, outcome.value)
    if outcome is Deletion.DELETED:
        return no_content()
    if outcome is Deletion.ALREADY_DELETED:
        raise Gone(f"{resource.describe(object_id)} was already deleted.")
    # The view's transaction has committed the new tombstone; this is an answer, not a failure.
    return problem(404, "not_found", f"{resource.describe(object_id)} does not exist; its ID is now reserved as deleted.")


def batch_created_or_returned(
    resource: Resource, items: Sequence[Any], schema: Schema, scope: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Validate each item on its own, create-or-return the valid ones in one
    transaction, and answer one result per item in order (each item counted
    as its single create would be).

    Each item is loaded by the schema of the single create (without webargs'
    per-request machinery) and an invalid one answers the very problem its
    single create would, in its place. A missing or deleted parent refuses
    every new item, item by item (404 or 410), as each single create would.
    """
    if len(items) > MAX_BATCH_ITEMS:
        raise PayloadTooLarge(f"A batch holds at most {MAX_BATCH_ITEMS:,} items; this one has {len(items):,}.")
    results: list[dict[str, Any] | None] = [None] * len(items)
    valid: list[tuple[int, dict[str, Any]]] = []
    for index, item in enumerate(items):
        try:
            values = {**schema.load(item), **scope}
            refuse_future_ids([values["id"]], "json", "id")
            valid.append((index, values))
        except ValidationError as error:
            results[index] = {"status": 422, "problem": ValidationFailed({"json": error.messages}).body()}
        except ValidationFailed as error:
            results[index] = {"status": 422, "problem": error.body()}
    if valid:
        with transaction() as db_session:
            created = create_or_return_many(
                db_session=db_session, resource=resource, items=[values for _, values in valid], horizon=horizon()
            )
        for (index, _), result in zip(valid, created):
            if counted(resource, result).error is None:
                results[index] = {"status": result.status, "object": result.row}
            else:
                results[index] = {"status": result.status, "problem": result.error.body()}
    return {"results": results}


def page(rows_and_next: tuple[Sequence[Any], Any]) -> dict[str, Any]:
    items, next_after = rows_and_next
    return {"items": items, "next_after": next_after}


def blueprint(registry: Registry = RESOURCES) -> Blueprint:
    """Every route of every resource in ``registry``, on a blueprint of its own (one per app)."""
    root = registry.roots[0]  # the tag is named after it ("Clusters and their firewall rules")
    under = " and ".join(f"{resource.words}s" for resource in root.descendants)
    blp = Blueprint(root.plural, __name__, url_prefix="/v1", description=f"{root.words.capitalize()}s and their {under}")
    for resource in registry:
        _collection_routes(blp, resource)
        _item_routes(blp, resource)
        if resource.parent is not None:
            _bulk_listing(blp, resource)
    return blp


def _collection_routes(blp: Blueprint, resource: Resource) -> None:
    schemas, words, parent = route_schemas(resource), resource.words, resource.parent
    create_schema = schemas["create"]()
    immutable = ", ".join(name for name in resource.immutable if name not in resource.scope_columns)
    no_parent = f"No such {parent.words}" if parent else None
    creates = coalesced_creates(resource)  # this app's single creates of the resource, per worker

    class Collection(MethodView):
        @blp.arguments(schemas["list_args"](), location="query")
        @blp.response(200, schemas["page"])
        @blp.problem(401, "No valid internal token")
        @(blp.problem(404, no_parent) if parent else unchanged)
        @(blp.problem(410, f"The {parent.words} was deleted (gone), or has no row and an ID older than the "
                      "horizon (id_expired)") if parent else unchanged)
        @documented(
            f"List live {words}s in id order (keyset pagination); with include_deleted, tombstones too."
            if parent is None
            else f"List a {parent.words}'s live {words}s in id order."
        )
        def get(self, args, **path_ids):
            refuse_future_ids(path_ids.values(), "path")
            scope = resource.scope_from_path(path_ids)
            owner = resource.declaration.owner  # a root's listing may be narrowed to one owner
            filters = {**scope, **({owner: args.pop(owner)} if owner else {})}
            with transaction() as db_session:
                if parent is not None:
                    get_live(db_session=db_session, resource=parent, object_id=scope[parent.id_column],
                             horizon=horizon(), scope=_ancestors_of(parent, scope))
                return page(list_live(
                    db_session=db_session,
                    resource=resource,
                    filters={name: value for name, value in filters.items() if value is not None},
                    **args,
                ))

        @blp.arguments(create_schema)
        @blp.response(201, schemas["out"], description="Created", headers=CREATED_HEADERS)
        @blp.alt_response(
            200, schema=schemas["out"], description="Already existed (Idempotent-Replayed: true)",
            headers=REPLAYED_HEADERS,
        )
        @(blp.problem(404, no_parent) if parent else unchanged)
        @blp.problem(409, f"The ID exists with a different {immutable} (id_conflict)")
        @blp.problem(410, (f"The {words} or its {parent.words} was deleted (gone), or the ID (or the "
                            f"{parent.words}'s) has no row and is older than the horizon (id_expired)") if parent
                     else "The ID was deleted (gone), or has no row and is older than the horizon (id_expired)")
        @documented(f"Create a {words} with the caller's ID, or return the one that has it.")
        def post(self, body, **path_ids):
            refuse_future_ids(path_ids.values(), "path")
            refuse_future_ids([body["id"]], "json", "id")
            return create_answer(resource, creates, {**body, **resource.scope_from_path(path_ids)})

    class Batch(MethodView):
        @blp.arguments(schemas["batch_create"]())
        @blp.response(200, schemas["batch_results"], description="One result per item, in order")
        @blp.problem(413, "More than 1,000 items, or a body over 1 MiB (payload_too_large)")
        @documented(
            f"Create or return up to 1,000 {words}s at once, in a body of at most 1 MiB.\n\n"
            "One transaction: one INSERT for the new items, one read for those that "
            "existed. Each item answers what its single create would have, in order; "
            "one bad item never fails the others. An ID repeated within the batch is "
            "decided by its first occurrence: identical repeats answer 200, "
            "conflicting ones 409."
            + (f" A missing or deleted {parent.words} is answered item by item (404 or 410 for each new "
               f"{words}), as each single create would answer it." if parent else "")
        )
        def post(self, batch, **path_ids):
            refuse_future_ids(path_ids.values(), "path")
            return batch_created_or_returned(
                resource, batch["items"], create_schema, resource.scope_from_path(path_ids)
            )

    Collection.creates = creates  # (for tests: how many flushes, and what waits for the next)
    path = resource.collection_path()
    blp.route(path, endpoint=f"{resource.key}_collection")(Collection)
    blp.route(f"{path}/{BATCH}", endpoint=f"{resource.key}_batch")(Batch)


def _item_routes(blp: Blueprint, resource: Resource) -> None:
    schemas, words = route_schemas(resource), resource.words
    under = [child.words + "s" for child in resource.children]
    write_args = schemas["write_args"]
    elsewhere = (
        f"The ID names a {words} under another {resource.parent.words} (id_conflict); nothing changed"
        if resource.parent is not None
        else f"The ID names another team's {words} (id_conflict); nothing changed"
    )

    class Item(MethodView):
        @blp.response(200, schemas["out"])
        @blp.problem(404, "Never existed")
        @blp.problem(410, (f"Deleted, or its {resource.parent.words} was (gone); or no row and an ID older "
                            "than the horizon (id_expired)") if resource.parent
                     else "Deleted (gone), or no row and an ID older than the horizon (id_expired)")
        @documented(f"Get a {words}.")
        def get(self, **path_ids):
            object_id, scope = _ids(resource, path_ids)
            with transaction() as db_session:
                return get_live(
                    db_session=db_session, resource=resource, object_id=object_id, horizon=horizon(), scope=scope
                )

        @(blp.arguments(write_args(), location="query", arg_name="owned_by") if write_args else unchanged)
        @blp.arguments(schemas["update"]())
        @blp.response(200, schemas["out"], description="The current state, whether applied or stale")
        @blp.problem(404, "Never existed")
        @blp.problem(409, elsewhere)
        @blp.problem(410, "Deleted (gone), or no row and an ID older than the horizon (id_expired)")
        @documented(f"Update a {words}'s mutable fields if the generation is newer than the stored one.")
        def put(self, body, owned_by=None, **path_ids):
            object_id, scope = _ids(resource, path_ids, owned_by)
            values = dict(body)
            generation = values.pop("generation")
            with transaction() as db_session:
                row, applied = apply_update(
                    db_session=db_session, resource=resource, object_id=object_id, generation=generation,
                    values=values, horizon=horizon(), scope=scope,
                )
            return updated(resource, row, applied)

        @(blp.arguments(write_args(), location="query", arg_name="owned_by") if write_args else unchanged)
        @blp.response(204, description="Deleted")
        @blp.problem(404, "Never existed; a tombstone is recorded" if resource.parent is None
                     else f"Never existed (a tombstone is recorded), or no such {resource.parent.words}")
        @blp.problem(409, elsewhere)
        @blp.problem(410, "Already deleted (gone), or no row and an ID older than the horizon: nothing is "
                          "recorded (id_expired)")
        @documented(
            f"Delete a {words}" + (f" and its {' and '.join(under)}" if under else "")
            + " (soft delete; the ID stays taken)."
        )
        def delete(self, owned_by=None, **path_ids):
            object_id, scope = _ids(resource, path_ids, owned_by)
            with transaction() as db_session:
                outcome = mark_deleted(
                    db_session=db_session, resource=resource, object_id=object_id, horizon=horizon(), scope=scope
                )
            return deleted(resource, outcome, object_id)

    blp.route(resource.item_path(), endpoint=resource.key)(Item)


def _bulk_listing(blp: Blueprint, resource: Resource) -> None:
    """Every object of a child resource across its parents, each with its tree's owner."""
    schemas = route_schemas(resource)

    class Bulk(MethodView):
        @blp.arguments(schemas["bulk_args"](), location="query")
        @blp.response(200, schemas["bulk_page"])
        @blp.problem(401, "No valid internal token")
        @documented(
            f"List every {resource.root.words}'s {resource.words}s in one id order (keyset pagination), "
            "each with its team.\n\nFor callers that compare their records with these, such as "
            "platform_svc's drift repair; with include_deleted, tombstones too."
        )
        def get(self, args):
            with transaction() as db_session:
                return page(list_live(
                    db_session=db_session, resource=resource, filters={},
                    root_columns=(resource.root.declaration.owner,), **args
                ))

    blp.route(f"/{resource.segment}", endpoint=f"{resource.key}_bulk")(Bulk)


def _ids(
    resource: Resource, path_ids: dict[str, Any], owned_by: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """The object's ID and the scope a route gives: its ancestors' IDs by column (its URL variables),
    and a root's owner when a write names it (``owned_by``: the query's ``team_id``).

    :raise ValidationFailed: one of them is a UUIDv7 from the future.
    """
    refuse_future_ids(path_ids.values(), "path")
    scope = resource.scope_from_path(path_ids)
    scope.update((name, value) for name, value in (owned_by or {}).items() if value is not None)
    return path_ids[resource.path_variable], scope


def _ancestors_of(resource: Resource, scope: dict[str, Any]) -> dict[str, Any]:
    return {column: scope[column] for column in resource.scope_columns}
