"""cluster_svc's request and response bodies."""
from __future__ import annotations

import functools
from typing import Any

from marshmallow import fields, utils, validate

from shared.api import MAX_BATCH_ITEMS
from shared.declaration import HIGHEST_GENERATION, Declaration
from shared.registry import Resource
from shared.schemas import (
    InputSchema,
    ObjectId,
    OutputSchema,
    PageArgs,
    ProblemSchema,
    StrictInteger,
    page_schema,
)

GENERATION = validate.Range(min=1, max=HIGHEST_GENERATION)
CALLERS_ID = {"description": "Chosen by the caller; the idempotency key"}


def generation_field(**kwargs) -> StrictInteger:
    return StrictInteger(validate=GENERATION, **kwargs)


INCLUDE_DELETED = {
    "description": "Also list tombstones, bare ones (an ID deleted before it was ever created) included;"
    " for a caller comparing its records with these, such as platform_svc's repair"
}


class ListArgs(PageArgs):
    """A bulk listing: every object of one resource, tombstones too on request."""

    include_deleted = fields.Boolean(load_default=False, metadata=INCLUDE_DELETED)


class LifecycleOut(OutputSchema):
    generation = fields.Integer()
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    deleted_at = fields.DateTime(allow_none=True)


# A bare tombstone (an ID deleted before it was ever created) has only its ID
# and timestamps; listed with include_deleted, its descriptive fields are null.
TOMBSTONE_NULL = {"allow_none": True}


# --- batch create ----------------------------------------------------------


class BatchItems(fields.List):
    """The items of a batch, documented as a list of the create body and loaded
    raw: each item is validated on its own afterwards, so one bad item answers
    422 in its place instead of failing the whole batch."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not utils.is_collection(value):
            raise self.make_error("invalid")
        return list(value)


def batch_schemas(item_in: type, item_out: type, name: str) -> tuple[type, type]:
    """The request and response bodies of a batch create of ``item_in``."""
    request = type(
        f"{name}BatchCreate",
        (InputSchema,),
        {
            "items": BatchItems(
                fields.Nested(item_in),
                required=True,
                validate=validate.Length(min=1),
                metadata={
                    "maxItems": MAX_BATCH_ITEMS,
                    "description": "1 to 1,000 create bodies, in a request body of at most 1 MiB (1,048,576 "
                    "bytes; long descriptions of characters JSON escapes, such as emoji, fit fewer items); "
                    "more is a 413",
                },
            )
        },
    )
    result = type(
        f"{name}BatchResult",
        (OutputSchema,),
        {
            "status": fields.Integer(
                metadata={"description": "201 created, 200 already existed, or the problem's status (404/409/410/422)"}
            ),
            "object": fields.Nested(item_out, metadata={"description": "With 201 and 200"}),
            "problem": fields.Nested(ProblemSchema, metadata={"description": "Otherwise"}),
        },
    )
    response = type(
        f"{name}BatchResults",
        (OutputSchema,),
        {"results": fields.List(fields.Nested(result), metadata={"description": "One per item, in the same order"})},
    )
    return request, response


def create_schema(declaration: Declaration) -> type:
    """A create: the caller's ``id``, every field (a root's owner too), and the generation (1 unless given)."""
    fields_ = {name: spec.loader(required=True, default=True) for name, spec in declaration.body.items()}
    fields_["id"] = ObjectId(required=True, metadata=CALLERS_ID)
    if declaration.owner:
        fields_[declaration.owner] = ObjectId(required=True)
    fields_["generation"] = generation_field(load_default=1)
    return type(f"{declaration.camel}Create", (InputSchema,), fields_)


def update_schema(declaration: Declaration) -> type:
    """A PUT: the generation it wants to reach and every mutable field."""
    fields_ = {name: spec.loader(required=True, default=False) for name, spec in declaration.mutable.items()}
    fields_["generation"] = generation_field(required=True)
    return type(f"{declaration.camel}Update", (InputSchema,), {"__doc__": update_schema.__doc__, **fields_})


def out_schema(declaration: Declaration) -> type:
    """The object: its ID, the owner (a root's) or its ancestors' IDs, and every field, after the lifecycle."""
    fields_: dict[str, Any] = {"id": fields.UUID()}
    if declaration.owner:
        fields_[declaration.owner] = fields.UUID(**TOMBSTONE_NULL)
    fields_.update((ancestor.id_column, fields.UUID()) for ancestor in declaration.ancestors)
    fields_.update((name, spec.dumper(**TOMBSTONE_NULL)) for name, spec in declaration.fields.items())
    return type(f"{declaration.camel}Out", (LifecycleOut,), fields_)


def list_args_schema(declaration: Declaration) -> type:
    """A collection's query: a page, and a root's listing may be narrowed to one owner."""
    if not declaration.owner:
        return PageArgs
    return type(f"{declaration.camel}ListArgs", (ListArgs,), {declaration.owner: ObjectId(load_default=None)})


def write_args_schema(declaration: Declaration) -> type | None:
    """A root's PUT and DELETE query: the owner the caller expects (None for a child, whose
    path names its ancestors)."""
    if not declaration.owner:
        return None
    owner = ObjectId(
        load_default=None,
        metadata={"description": "Change it only if this team owns it: another team's object answers 409 "
                                 "id_conflict, and nothing changes"},
    )
    return type(f"{declaration.camel}WriteArgs", (InputSchema,), {declaration.owner: owner})


@functools.cache
def route_schemas(resource: Resource) -> dict[str, type]:
    """Every body of one resource's routes, by role, named after its key (``FirewallRulePage``),
    derived once from its declaration: ``create``, ``update``, ``out``, ``list_args`` (the query
    of its collection's listing), ``write_args`` (a root's PUT and DELETE query, else None), the pages, the batch bodies and the bulk listing's."""
    declaration, owner = resource.declaration, resource.root.declaration.owner
    name, create, out = declaration.camel, create_schema(declaration), out_schema(declaration)
    batch_create, batch_results = batch_schemas(create, out, name)
    listed = type(
        f"{name}Listed",
        (out,),
        {
            "__doc__": "An object in the listing across parents: with the team that owns its tree.",
            owner: fields.UUID(allow_none=True, metadata={"description": "The team that owns it"}),
        },
    )
    return {
        "create": create,
        "update": update_schema(declaration),
        "out": out,
        "list_args": list_args_schema(declaration),
        "write_args": write_args_schema(declaration),
        "page": page_schema(out, f"{name}Page"),
        "batch_create": batch_create,
        "batch_results": batch_results,
        "bulk_args": ListArgs,
        "bulk_page": page_schema(listed, f"{name}ListedPage"),
    }
