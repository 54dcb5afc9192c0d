"""What the platform owns of each object, where it lives in cluster_svc, and whether cluster_svc's
copy says the same.

Everything here is derived from the resource's declaration, so a new
resource is compared without a line of its own: a create sends every
declared field with the ones the platform owns (``id``, ``generation``, and a
root object's account as its declared owner, such as ``team_id``); an update
sends the mutable fields with the wanted generation. The platform owns every one of
those fields: cluster_svc's copy is right when, at the platform's generation,
it holds exactly them.

Values are compared as they travel (JSON): the platform's row is dumped by
its public output schema, cluster_svc's answer is what its output schema
dumped, so a network, a UUID or a number is spelled the same on both sides.

What the platform checks of cluster_svc's copy (:func:`expected`) is those
fields *and the object's ancestry* (a child's parents' IDs): a copy under
another parent, of another team or with another immutable field is not this
object, whatever its generation says (:func:`fixed_differing`).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import RowMapping

from platform_svc.schemas import route_schemas
from shared.registry import Resource

PLATFORM_OWNED = ("id", "generation")  # sent with every create, but not fields to compare


def collection_url(resource: Resource, row: RowMapping) -> str:
    """cluster_svc's collection the row belongs to (its ancestors' IDs come from the row itself)."""
    return f"/v1{resource.collection_path(row)}"


def item_url(resource: Resource, row: RowMapping) -> str:
    return f"/v1{resource.item_path(row)}"


def write_url(resource: Resource, row: RowMapping) -> str:
    """Where an update or delete of ``row`` goes: its path (which names its ancestors) and, for a
    root, the owner it must have there. cluster_svc refuses (409) a write to an object that is not
    the platform's (another team's, or under another parent), so a write held back after an
    ``id_conflict`` can never change another team's object."""
    owner = resource.declaration.owner
    return f"{item_url(resource, row)}?{owner}={row['account_id']}" if owner else item_url(resource, row)


def create_body(resource: Resource, row: RowMapping) -> dict[str, Any]:
    """What a create of ``row`` sends down."""
    body = {"id": str(row["id"]), **_dumper(resource, "create").dump(row), "generation": row["generation"]}
    owner = resource.declaration.owner
    if owner:
        body[owner] = str(row["account_id"])
    return body


def update_body(resource: Resource, row: RowMapping) -> dict[str, Any]:
    """What an update of ``row`` sends down: the wanted generation and every mutable field."""
    return {"generation": row["generation"], **_dumper(resource, "update").dump(row)}


def fields(resource: Resource, row: RowMapping) -> dict[str, Any]:
    """Every field the platform owns of ``row`` (mutable and immutable), as pushed, without id and generation."""
    return {name: value for name, value in create_body(resource, row).items() if name not in PLATFORM_OWNED}


@functools.cache
def owned(resource: Resource) -> frozenset[str]:
    """The names :func:`fields` gives: every declared field, and a root object's owner."""
    declaration = resource.declaration
    return frozenset(declaration.fields) | ({declaration.owner} if declaration.owner else set())


def expected(resource: Resource, row: RowMapping) -> dict[str, Any]:
    """What cluster_svc's copy of ``row`` must show, besides its ID and generation: every field the
    platform owns (:func:`fields`) and its ancestors' IDs."""
    return {**fields(resource, row), **{column: str(row[column]) for column in resource.scope_columns}}


@functools.cache
def compared(resource: Resource) -> frozenset[str]:
    """The names :func:`expected` gives."""
    return owned(resource) | frozenset(resource.scope_columns)


@functools.cache
def mutable(resource: Resource) -> frozenset[str]:
    """The fields an update can change."""
    return frozenset(resource.declaration.mutable)


def fixed_differing(resource: Resource, row: RowMapping, theirs: Mapping[str, Any]) -> list[str]:
    """What no update can change and cluster_svc's copy holds otherwise: its ancestry, its owner or an
    immutable field (a name the copy lacks counts as differing: it proves nothing)."""
    mutable_names = mutable(resource)
    return sorted(
        name for name, value in expected(resource, row).items()
        if name not in mutable_names and theirs.get(name, _MISSING) != value
    )


_MISSING = object()


def mutable_differing(resource: Resource, row: RowMapping, theirs: Mapping[str, Any]) -> list[str]:
    """The mutable fields cluster_svc's copy holds otherwise (or lacks)."""
    names = mutable(resource)
    return sorted(
        name for name, value in expected(resource, row).items()
        if name in names and theirs.get(name, _MISSING) != value
    )


@functools.cache
def _dumper(resource: Resource, operation: str) -> Any:
    """The public output schema, limited to the fields a create or an update sends (values as JSON wants them)."""
    declaration = resource.declaration
    names = declaration.body if operation == "create" else declaration.mutable
    return route_schemas(resource)["out"](only=tuple(names))
