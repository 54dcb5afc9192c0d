"""A third resource the product does not ship: notes on a firewall rule (two levels deep).

Loaded into real service processes through ``RESOURCE_MODULES=tests.e2e.notes``,
exactly as a deployment would add a resource of its own: one declaration,
a model per service (the services derive their bodies, routes and pushes
from the declaration), and the tables a migration per side would create. Never imported by the
test process itself (its models join the services' metadata, which the
migration tests compare with the migrations); :func:`create_tables` runs in a
subprocess of its own.
"""
from __future__ import annotations

import sys
import uuid

from marshmallow import fields, validate
from sqlalchemy import CheckConstraint, ForeignKey, String, Uuid, create_engine
from sqlalchemy.orm import Mapped, mapped_column

import cluster_svc.models as cluster_models
import platform_svc.models as platform_models
from shared.contract import FIREWALL_RULE
from shared.declaration import Declaration, Field
from shared.schemas import Text

NOTE = Declaration(
    "note",
    parent=FIREWALL_RULE,
    fields={
        "topic": Field(fields.String, validate=validate.OneOf(("audit", "owner", "expiry")), immutable=True),
        "text": Field(Text, validate=validate.Length(max=200), default=""),
    },
)


class Note(cluster_models.Lifecycle, cluster_models.Base, declares=NOTE):
    __tablename__ = "notes"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    cluster_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("clusters.id"), nullable=False)
    firewall_rule_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("firewall_rules.id"), nullable=False)
    topic: Mapped[str | None] = mapped_column(String(16))
    text: Mapped[str | None] = mapped_column(String(200))

    __table_args__ = (
        CheckConstraint("deleted_at IS NOT NULL OR topic IS NOT NULL", name="live_rows_complete"),
        cluster_models.tombstones_index("notes"),
    )


class PlatformNote(platform_models.Object, declares=NOTE):
    __tablename__ = "notes"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    cluster_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("clusters.id"))
    firewall_rule_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("firewall_rules.id"), index=True)
    topic: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(String(200))


def create_tables(cluster_db_url: str, platform_db_url: str) -> None:
    """The tables a migration of a real deployment would create, on both sides."""
    for table, url in ((Note.__table__, cluster_db_url), (PlatformNote.__table__, platform_db_url)):
        engine = create_engine(url)
        try:
            table.create(engine)
        finally:
            engine.dispose()


if __name__ == "__main__":
    create_tables(*sys.argv[1:3])
