"""cluster_svc's tables, and the registry of the resources they hold.

Each resource's model names its declaration (``declares=``, see
:mod:`shared.declaration`) and holds its fields, the owner of a root tree
(``team_id``), its ancestors' IDs and the lifecycle columns below; it is
registered in :data:`RESOURCES` as it is defined.

A row whose ``deleted_at`` is set is a tombstone: it is what makes a repeated
delete answer 410 and a late create fail instead of resurrecting the object.
It stays until its ID is past the UUIDv7 horizon, when no create of that ID
is accepted any more and ``cluster-svc purge`` removes it (shared.horizon).
A DELETE of an ID never seen stores a bare tombstone (ID and ``deleted_at``
only), so the descriptive columns are nullable and a CHECK keeps them required
on every live row. A model writes only what is its own: its table, columns,
that CHECK and the tombstones' index are derived from its declaration
(:func:`shared.registry.registering`).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, Index, Integer, MetaData, Uuid, func, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from shared import contract
from shared.db import NAMING_CONVENTION
from shared.declaration import Declaration
from shared.registry import Registry, declared_columns, registering


def _table_args(declaration: Declaration, table: str) -> tuple[Any, ...]:
    """What every resource's table gets beside its own constraints: a CHECK keeping a live row
    complete (a bare tombstone holds only its ID), generations from 1, and its tombstones in
    ``(deleted_at, id)`` order, where the tombstone gauges and purge read them, never the table."""
    required = [f"{name} IS NOT NULL" for name in declaration.required]
    complete = " AND ".join(required) if len(required) == 1 else f"({' AND '.join(required)})"
    return (
        *([CheckConstraint(f"deleted_at IS NOT NULL OR {complete}", name="live_rows_complete")] if required else []),
        CheckConstraint("generation >= 1", name="generation_positive"),
        Index(f"ix_{table}_deleted", "deleted_at", "id", postgresql_where=text("deleted_at IS NOT NULL")),
    )


class Lifecycle:
    """Columns every resource shares: version, timestamps and the tombstone mark."""

    generation: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


def _own_columns(declaration: Declaration) -> tuple[str, ...]:
    """What cluster_svc adds to a declared resource's table: its ID (the caller's), the
    lifecycle columns, and a root's owner."""
    return ("id", *Lifecycle.__annotations__, *([declaration.owner] if declaration.owner else []))


def _model_columns(declaration: Declaration) -> dict[str, Any]:
    """The declared columns, nullable (a bare tombstone has none), and a root's owner."""
    columns = declared_columns(declaration, nullable=True, index_parent=False)
    if declaration.owner:
        columns[declaration.owner] = mapped_column(Uuid, nullable=True)
    return columns


RESOURCES = Registry(columns=_own_columns, immutable=lambda declaration: declaration.immutable_columns)


class Base(registering(RESOURCES, columns=_model_columns, table_args=_table_args), DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Cluster(Lifecycle, Base, declares=contract.CLUSTER):
    # Listing a team's live clusters in id order (keyset pagination).
    __table_args__ = (Index("ix_clusters_team_id_live", "team_id", "id", postgresql_where=text("deleted_at IS NULL")),)


class FirewallRule(Lifecycle, Base, declares=contract.FIREWALL_RULE):
    __table_args__ = (Index("ix_firewall_rules_cluster_id", "cluster_id", "id"),)
