"""cluster_svc's request and response bodies."""
from __future__ import annotations

from marshmallow import fields, utils, validate

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
    Text,
    page_schema,
)

GENERATION = validate.Range(min=1, max=2**31 - 1)


def _generation(**kwargs) -> StrictInteger:
    return StrictInteger(validate=GENERATION, **kwargs)


class ClusterCreate(ClusterFields):
    id = ObjectId(required=True, metadata={"description": "Chosen by the caller; the idempotency key"})
    team_id = ObjectId(required=True)
    generation = _generation(load_default=1)


class ClusterUpdate(ClusterMutableFields):
    """A PUT: the generation it wants to reach and every mutable field."""

    generation = _generation(required=True)


class ClusterListArgs(PageArgs):
    team_id = ObjectId(load_default=None)


class _Lifecycle(OutputSchema):
    generation = fields.Integer()
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    deleted_at = fields.DateTime(allow_none=True)


class ClusterOut(_Lifecycle):
    id = fields.UUID()
    team_id = fields.UUID()
    name = fields.String()
    region = fields.String()
    postgres_version = fields.Integer()
    plan = fields.String()
    storage_gb = fields.Integer()


class FirewallRuleCreate(FirewallRuleFields):
    id = ObjectId(required=True, metadata={"description": "Chosen by the caller; the idempotency key"})
    generation = _generation(load_default=1)


class FirewallRuleUpdate(FirewallRuleMutableFields):
    """A PUT: the generation it wants to reach and every mutable field."""

    generation = _generation(required=True)
    description = Text(required=True, validate=validate.Length(max=255))


class FirewallRuleOut(_Lifecycle):
    id = fields.UUID()
    cluster_id = fields.UUID()
    cidr = IPNetwork()
    description = fields.String()


ClusterPage = page_schema(ClusterOut, "ClusterPage")
FirewallRulePage = page_schema(FirewallRuleOut, "FirewallRulePage")


# --- batch create ----------------------------------------------------------

MAX_BATCH_ITEMS = 1000


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
                metadata={"maxItems": MAX_BATCH_ITEMS, "description": "1 to 1,000 create bodies; more is a 413"},
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


ClusterBatchCreate, ClusterBatchResults = batch_schemas(ClusterCreate, ClusterOut, "Cluster")
FirewallRuleBatchCreate, FirewallRuleBatchResults = batch_schemas(FirewallRuleCreate, FirewallRuleOut, "FirewallRule")
