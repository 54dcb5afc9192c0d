"""platform_svc's public request and response bodies.

The public bodies are cluster_svc's without the fields the platform owns: it
adds ``id`` (a UUIDv7), ``team_id`` (the account) and ``generation``.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, validates_schema

from shared.schemas import (
    ClusterFields,
    ClusterMutableFields,
    FirewallRuleFields,
    FirewallRuleMutableFields,
    InputSchema,
    IPNetwork,
    OutputSchema,
    page_schema,
)


class ClusterCreate(ClusterFields):
    pass


class _Patch:
    class Meta(InputSchema.Meta):
        json_schema = {"minProperties": 1}  # as _not_empty below refuses {}

    @validates_schema
    def _not_empty(self, data, **kwargs):
        if not data:
            raise ValidationError("Send at least one field to change.")


class ClusterPatch(_Patch, ClusterMutableFields):
    """Any of the mutable fields; each PATCH bumps the generation."""


class FirewallRuleCreate(FirewallRuleFields):
    pass


class FirewallRulePatch(_Patch, FirewallRuleMutableFields):
    pass


class _Synced(OutputSchema):
    generation = fields.Integer()
    sync_state = fields.String(metadata={"description": "pending, synced or failed"})
    sync_error = fields.String(allow_none=True, metadata={"description": "Why the last push did not succeed"})
    synced_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    deleted_at = fields.DateTime(allow_none=True)


class ClusterOut(_Synced):
    id = fields.UUID(metadata={"description": "A UUIDv7 the platform assigned"})
    name = fields.String()
    region = fields.String()
    postgres_version = fields.Integer()
    plan = fields.String()
    storage_gb = fields.Integer()


class FirewallRuleOut(_Synced):
    id = fields.UUID()
    cluster_id = fields.UUID()
    cidr = IPNetwork()
    description = fields.String()


ClusterPage = page_schema(ClusterOut, "ClusterPage")
FirewallRulePage = page_schema(FirewallRuleOut, "FirewallRulePage")
