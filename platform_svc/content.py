"""What the platform owns of each object, and whether cluster_svc's copy says the same.

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
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import RowMapping

from platform_svc.schemas import route_schemas
from shared.registry import Resource

PLATFORM_OWNED = ("id", "generation")  # sent with every create, but not fields to compare


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


@functools.cache
def mutable(resource: Resource) -> frozenset[str]:
    """The fields an update can change."""
    return frozenset(resource.declaration.mutable)


def differing(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The names of ``ours`` whose value ``theirs`` spells otherwise (a field ``theirs`` lacks is not compared)."""
    return sorted(name for name, value in ours.items() if name in theirs and theirs[name] != value)


def ahead(row: RowMapping, answer: Any) -> int | None:
    """cluster_svc's generation, when its answer to a create or update shows a state that push did not set.

    That is: its generation is above the one sent (a stale update, or a
    create replayed onto a newer copy), or it is the one sent with other
    fields than were sent (someone wrote that generation behind the
    platform's back). Such an answer confirms nothing: the platform owns the
    fields, so it moves past that generation and pushes them again. A lower
    generation is not ahead: it is what cluster_svc had (a create replayed
    onto an older copy), and the update follows.
    """
    theirs = answer.body
    if not isinstance(theirs, Mapping) or not isinstance(theirs.get("generation"), int):
        return None
    generation = theirs["generation"]
    if generation > row["generation"]:
        return generation
    sent = {name: value for name, value in (answer.sent or {}).items() if name not in PLATFORM_OWNED}
    if generation == row["generation"] and differing(sent, theirs):
        return generation
    return None


@functools.cache
def _dumper(resource: Resource, operation: str) -> Any:
    """The public output schema, limited to the fields a create or an update sends (values as JSON wants them)."""
    declaration = resource.declaration
    names = declaration.body if operation == "create" else declaration.mutable
    return route_schemas(resource)["out"](only=tuple(names))
