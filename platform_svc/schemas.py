"""platform_svc's public request and response bodies, derived from each resource's declaration.

The public bodies are cluster_svc's without the fields the platform owns: it
adds ``id`` (a UUIDv7), a root's owner (the account) and ``generation``.
"""
from __future__ import annotations

import functools
from typing import Any

from marshmallow import ValidationError, fields, validate, validates_schema

from platform_svc.states import STORED
from shared.declaration import Declaration
from shared.openapi import FullMatch
from shared.registry import Resource
from shared.schemas import InputSchema, OutputSchema, PageArgs, page_schema

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


class Patch:
    """Any of the mutable fields; each PATCH bumps the generation."""

    class Meta(InputSchema.Meta):
        json_schema = {"minProperties": 1}  # as _not_empty below refuses {}

    @validates_schema
    def _not_empty(self, data, **kwargs):
        if not data:
            raise ValidationError("Send at least one field to change.")


class SyncedOut(OutputSchema):
    generation = fields.Integer()
    sync_state = fields.String(
        validate=validate.OneOf(STORED),
        metadata={"description": "pending (cluster_svc has not confirmed it yet), synced, or failed"},
    )
    sync_error = fields.String(allow_none=True, metadata={"description": "Why the last push did not succeed"})
    synced_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    deleted_at = fields.DateTime(allow_none=True)


ID = {"description": "A UUIDv7 the platform assigned"}


@functools.cache
def route_schemas(resource: Resource) -> dict[str, type]:
    """The public bodies of one resource, by role, named after its key, derived once from its
    declaration: ``create`` (every field), ``patch`` (any mutable field), ``out`` and ``page``."""
    declaration = resource.declaration
    out = out_schema(declaration)
    return {
        "create": create_schema(declaration),
        "patch": patch_schema(declaration),
        "out": out,
        "page": page_schema(out, f"{declaration.camel}Page"),
    }


def create_schema(declaration: Declaration) -> type:
    fields_ = {name: spec.loader(required=True, default=True) for name, spec in declaration.body.items()}
    return type(f"{declaration.camel}Create", (InputSchema,), fields_)


def patch_schema(declaration: Declaration) -> type:
    fields_ = {name: spec.loader(required=False, default=False) for name, spec in declaration.mutable.items()}
    return type(f"{declaration.camel}Patch", (Patch, InputSchema), {"__doc__": Patch.__doc__, **fields_})


def out_schema(declaration: Declaration) -> type:
    fields_: dict[str, Any] = {"id": fields.UUID(metadata=ID)}
    fields_.update((ancestor.id_column, fields.UUID()) for ancestor in declaration.ancestors)
    fields_.update((name, spec.dumper()) for name, spec in declaration.fields.items())
    return type(f"{declaration.camel}Out", (SyncedOut,), fields_)
