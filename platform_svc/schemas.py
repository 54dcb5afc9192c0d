"""platform_svc's public request and response bodies.

The public bodies are cluster_svc's without the fields the platform owns: it
adds ``id`` (a UUIDv7), ``team_id`` (the account) and ``generation``.
"""
from __future__ import annotations

import functools

from marshmallow import ValidationError, fields, validate, validates_schema

from shared.schemas import (
    ClusterFields,
    ClusterMutableFields,
    FirewallRuleFields,
    FirewallRuleMutableFields,
    InputSchema,
    IPNetwork,
    OutputSchema,
    PageArgs,
    page_schema,
)
from shared.openapi import FullMatch
from shared.registry import Resource

# 1-255 printable ASCII characters, none at either end (where HTTP trims whitespace).
IDEMPOTENCY_KEY_PATTERN = "^[!-~]([ -~]{0,253}[!-~])?$"


class ListArgs(PageArgs):
    """A listing's page, or the recovery route for a lost answer: the object an Idempotency-Key created."""

    idempotency_key = fields.String(
        load_default=None,
        validate=[validate.Length(max=255), FullMatch(IDEMPOTENCY_KEY_PATTERN,
                                                     error="Must be 1 to 255 printable ASCII characters.")],
        metadata={
            "description": "List only the object a create with this Idempotency-Key made, if it is alive "
            "(one or none): how a caller that lost the answer to a keyed create finds what it produced, "
            "without sending the body again."
        },
    )


class ClusterCreate(ClusterFields):
    pass


class Patch:
    class Meta(InputSchema.Meta):
        json_schema = {"minProperties": 1}  # as _not_empty below refuses {}

    @validates_schema
    def _not_empty(self, data, **kwargs):
        if not data:
            raise ValidationError("Send at least one field to change.")


class ClusterPatch(Patch, ClusterMutableFields):
    """Any of the mutable fields; each PATCH bumps the generation."""


class FirewallRuleCreate(FirewallRuleFields):
    pass


class FirewallRulePatch(Patch, FirewallRuleMutableFields):
    pass


class SyncedOut(OutputSchema):
    generation = fields.Integer()
    sync_state = fields.String(metadata={"description": "pending, synced or failed"})
    sync_error = fields.String(allow_none=True, metadata={"description": "Why the last push did not succeed"})
    synced_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    deleted_at = fields.DateTime(allow_none=True)


class ClusterOut(SyncedOut):
    id = fields.UUID(metadata={"description": "A UUIDv7 the platform assigned"})
    name = fields.String()
    region = fields.String()
    postgres_version = fields.Integer()
    plan = fields.String()
    storage_gb = fields.Integer()


class FirewallRuleOut(SyncedOut):
    id = fields.UUID()
    cluster_id = fields.UUID()
    cidr = IPNetwork()
    description = fields.String()


@functools.lru_cache(maxsize=None)
def page_of(resource: Resource) -> type:
    """A page of the resource's ``out`` schema, named after its key (``FirewallRulePage``), made once."""
    return page_schema(resource.schemas["out"], f"{resource.camel}Page")
