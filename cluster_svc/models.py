"""cluster_svc's tables, and the registry of the resources they hold.

Each resource's model names its declaration (``declares=``, see
:mod:`shared.declaration`) and holds its fields, the owner of a root tree
(``team_id``), its ancestors' IDs and the lifecycle columns below; it is
registered in :data:`RESOURCES` as it is defined.

A row whose ``deleted_at`` is set is a tombstone: it is what makes a repeated
delete answer 410 and a late create fail instead of resurrecting the object.
It stays until its ID is past the UUIDv7 horizon, when no create of that ID
is accepted any more and ``cluster-svc purge`` removes it (shared.horizon). A DELETE of an ID never seen stores a bare tombstone
(ID and ``deleted_at`` only), so the descriptive columns are nullable and a
CHECK keeps them required on every live row.
"""
from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Index, Integer, MetaData, String, Uuid, func, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from shared import contract
from shared.db import NAMING_CONVENTION
from shared.declaration import Declaration
from shared.registry import Registry, registering
from shared.types import IPNetworkType


def tombstones_index(table: str) -> Index:
    """Every table's tombstones in ``(deleted_at, id)`` order: the tombstone gauges
    and purge read them here, never the table."""
    return Index(f"ix_{table}_deleted", "deleted_at", "id", postgresql_where=text("deleted_at IS NOT NULL"))


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


RESOURCES = Registry(columns=_own_columns, immutable=lambda declaration: declaration.immutable_columns)


class Base(registering(RESOURCES), DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Cluster(Lifecycle, Base, declares=contract.CLUSTER):
    __tablename__ = "clusters"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    team_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    name: Mapped[str | None] = mapped_column(String(63))
    region: Mapped[str | None] = mapped_column(String(32))
    postgres_version: Mapped[int | None] = mapped_column(Integer)
    plan: Mapped[str | None] = mapped_column(String(32))
    storage_gb: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        CheckConstraint(
            "deleted_at IS NOT NULL OR (team_id IS NOT NULL AND name IS NOT NULL AND region IS NOT NULL"
            " AND postgres_version IS NOT NULL AND plan IS NOT NULL AND storage_gb IS NOT NULL)",
            name="live_rows_complete",
        ),
        CheckConstraint("generation >= 1", name="generation_positive"),
        # Listing a team's live clusters in id order (keyset pagination).
        Index("ix_clusters_team_id_live", "team_id", "id", postgresql_where=text("deleted_at IS NULL")),
        tombstones_index("clusters"),
    )


class FirewallRule(Lifecycle, Base, declares=contract.FIREWALL_RULE):
    __tablename__ = "firewall_rules"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    cluster_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("clusters.id"), nullable=False)
    cidr: Mapped[str | None] = mapped_column(IPNetworkType)
    description: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (
        CheckConstraint("deleted_at IS NOT NULL OR cidr IS NOT NULL", name="live_rows_complete"),
        CheckConstraint("generation >= 1", name="generation_positive"),
        Index("ix_firewall_rules_cluster_id", "cluster_id", "id"),
        tombstones_index("firewall_rules"),
    )
