"""cluster_svc's request and response bodies."""
from __future__ import annotations

import functools

from marshmallow import fields, utils, validate

from shared.api import MAX_BATCH_ITEMS
from shared.registry import Resource
from shared.schemas import (
    ClusterFields,
    ClusterMutableFields,
    FirewallRuleFields,
    FirewallRuleMutableFields,
    InputSchema,
    IPNetwork,
    ObjectId,
    OutputSchema,
    PageArgs,
    ProblemSchema,
    StrictInteger,
    description_field,
    page_schema,
)

GENERATION = validate.Range(min=1, max=2**31 - 1)


def generation_field(**kwargs) -> StrictInteger:
    return StrictInteger(validate=GENERATION, **kwargs)


class ClusterCreate(ClusterFields):
    id = ObjectId(required=True, metadata={"description": "Chosen by the caller; the idempotency key"})
    team_id = ObjectId(required=True)
    generation = generation_field(load_default=1)


class ClusterUpdate(ClusterMutableFields):
    """A PUT: the generation it wants to reach and every mutable field."""

    generation = generation_field(required=True)


INCLUDE_DELETED = {
    "description": "Also list tombstones, bare ones (an ID deleted before it was ever created) included;"
    " for a caller comparing its records with these, such as platform_svc's repair"
}


class ListArgs(PageArgs):
    """A bulk listing: every object of one resource, tombstones too on request."""

    include_deleted = fields.Boolean(load_default=False, metadata=INCLUDE_DELETED)


class ClusterListArgs(ListArgs):
    team_id = ObjectId(load_default=None)


class LifecycleOut(OutputSchema):
    generation = fields.Integer()
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    deleted_at = fields.DateTime(allow_none=True)


# A bare tombstone (an ID deleted before it was ever created) has only its ID
# and timestamps; listed with include_deleted, its descriptive fields are null.
TOMBSTONE_NULL = {"allow_none": True}


class ClusterOut(LifecycleOut):
    id = fields.UUID()
    team_id = fields.UUID(**TOMBSTONE_NULL)
    name = fields.String(**TOMBSTONE_NULL)
    region = fields.String(**TOMBSTONE_NULL)
    postgres_version = fields.Integer(**TOMBSTONE_NULL)
    plan = fields.String(**TOMBSTONE_NULL)
    storage_gb = fields.Integer(**TOMBSTONE_NULL)


class FirewallRuleCreate(FirewallRuleFields):
    id = ObjectId(required=True, metadata={"description": "Chosen by the caller; the idempotency key"})
    generation = generation_field(load_default=1)


class FirewallRuleUpdate(FirewallRuleMutableFields):
    """A PUT: the generation it wants to reach and every mutable field."""

    generation = generation_field(required=True)
    description = description_field(required=True)


class FirewallRuleOut(LifecycleOut):
    id = fields.UUID()
    cluster_id = fields.UUID()
    cidr = IPNetwork(**TOMBSTONE_NULL)
    description = fields.String(**TOMBSTONE_NULL)




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


@functools.cache
def route_schemas(resource: Resource) -> dict[str, type]:
    """Every body of one resource's routes, by role, named after its key (``FirewallRulePage``).

    ``create``, ``update`` and ``out`` are the resource's own (its
    registration's ``schemas``), and so is ``list_args`` if given: the query
    of its collection's listing (a root's may filter by more). The pages, the
    batch bodies and the bulk listing's are derived, once per resource.
    """
    name, create, out = resource.camel, resource.schemas["create"], resource.schemas["out"]
    batch_create, batch_results = batch_schemas(create, out, name)
    listed = type(
        f"{name}Listed",
        (out,),
        {
            "__doc__": "An object in the listing across parents: with the team that owns its tree.",
            "team_id": fields.UUID(allow_none=True, metadata={"description": "The team that owns it"}),
        },
    )
    return {
        "list_args": PageArgs,
        **resource.schemas,
        "page": page_schema(out, f"{name}Page"),
        "batch_create": batch_create,
        "batch_results": batch_results,
        "bulk_args": ListArgs,
        "bulk_page": page_schema(listed, f"{name}ListedPage"),
    }
