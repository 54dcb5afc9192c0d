"""cluster_svc's request and response bodies."""
from __future__ import annotations

from marshmallow import fields, validate

from shared.schemas import (
    ClusterFields,
    ClusterMutableFields,
    FirewallRuleFields,
    FirewallRuleMutableFields,
    IPNetwork,
    ObjectId,
    OutputSchema,
    PageArgs,
    StrictInteger,
    description_field,
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
    description = description_field(required=True)


class FirewallRuleOut(_Lifecycle):
    id = fields.UUID()
    cluster_id = fields.UUID()
    cidr = IPNetwork()
    description = fields.String()


ClusterPage = page_schema(ClusterOut, "ClusterPage")
FirewallRulePage = page_schema(FirewallRuleOut, "FirewallRulePage")
