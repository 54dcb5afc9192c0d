"""cluster_svc's request and response bodies."""
from __future__ import annotations

from marshmallow import fields, validate

from cluster_svc.models import PLANS, POSTGRES_VERSIONS, REGIONS, STORAGE_GB
from shared.schemas import InputSchema, IPNetwork, ObjectId, OutputSchema, PageArgs, StrictInteger, Text, page_schema

NAME = validate.Regexp(r"^[a-z0-9-]{1,63}$", error="Must be 1 to 63 characters of a-z, 0-9 and '-'.")
GENERATION = validate.Range(min=1, max=2**31 - 1)


def _name() -> fields.String:
    return fields.String(required=True, validate=NAME)


def _plan() -> fields.String:
    return fields.String(required=True, validate=validate.OneOf(PLANS))


def _storage_gb() -> StrictInteger:
    return StrictInteger(required=True, validate=validate.Range(*STORAGE_GB))


class ClusterCreate(InputSchema):
    id = ObjectId(required=True, metadata={"description": "Chosen by the caller; the idempotency key"})
    team_id = ObjectId(required=True)
    name = _name()
    region = fields.String(required=True, validate=validate.OneOf(REGIONS))
    postgres_version = StrictInteger(required=True, validate=validate.Range(*POSTGRES_VERSIONS))
    plan = _plan()
    storage_gb = _storage_gb()
    generation = StrictInteger(load_default=1, validate=GENERATION)


class ClusterUpdate(InputSchema):
    """A PUT: the generation it wants to reach and every mutable field."""

    generation = StrictInteger(required=True, validate=GENERATION)
    name = _name()
    plan = _plan()
    storage_gb = _storage_gb()


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


class FirewallRuleCreate(InputSchema):
    id = ObjectId(required=True, metadata={"description": "Chosen by the caller; the idempotency key"})
    cidr = IPNetwork(required=True, metadata={"description": "IPv4 or IPv6 network, e.g. 10.0.0.0/8"})
    description = Text(load_default="", validate=validate.Length(max=255))
    generation = StrictInteger(load_default=1, validate=GENERATION)


class FirewallRuleUpdate(InputSchema):
    generation = StrictInteger(required=True, validate=GENERATION)
    description = Text(required=True, validate=validate.Length(max=255))


class FirewallRuleOut(_Lifecycle):
    id = fields.UUID()
    cluster_id = fields.UUID()
    cidr = fields.String()
    description = fields.String()


ClusterPage = page_schema(ClusterOut, "ClusterPage")
FirewallRulePage = page_schema(FirewallRuleOut, "FirewallRulePage")
