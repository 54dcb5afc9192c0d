"""A third resource the product does not ship: notes on a firewall rule (two levels deep).

Loaded into real service processes through ``RESOURCE_MODULES=tests.e2e.notes``,
exactly as a deployment would add a resource of its own: a model and schemas
on each side, and one registration line per service. Never imported by the
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
import cluster_svc.schemas as cluster_schemas
import platform_svc.models as platform_models
import platform_svc.schemas as platform_schemas
from cluster_svc.resources import FIREWALL_RULE as CLUSTER_SVC_FIREWALL_RULE
from cluster_svc.resources import RESOURCES as CLUSTER_SVC_RESOURCES
from platform_svc.resources import FIREWALL_RULE as PLATFORM_FIREWALL_RULE
from platform_svc.resources import KEY_REPLAY
from platform_svc.resources import RESOURCES as PLATFORM_RESOURCES
from shared.registry import Resource
from shared.schemas import InputSchema, ObjectId, Text

TOPICS = ("audit", "owner", "expiry")


# -- the fields both sides validate ------------------------------------------------


class NoteMutableFields(InputSchema):
    text = Text(validate=validate.Length(max=200))


class NoteFields(NoteMutableFields):
    text = Text(validate=validate.Length(max=200), load_default="")
    topic = fields.String(required=True, validate=validate.OneOf(TOPICS))


# -- cluster_svc -------------------------------------------------------------------


class Note(cluster_models.Lifecycle, cluster_models.Base):
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


class NoteCreate(NoteFields):
    id = ObjectId(required=True)
    generation = cluster_schemas.generation_field(load_default=1)


class NoteUpdate(NoteMutableFields):
    generation = cluster_schemas.generation_field(required=True)
    text = Text(validate=validate.Length(max=200), required=True)


class NoteOut(cluster_schemas.LifecycleOut):
    id = fields.UUID()
    cluster_id = fields.UUID()
    firewall_rule_id = fields.UUID()
    topic = fields.String(allow_none=True)
    text = fields.String(allow_none=True)


CLUSTER_SVC_RESOURCES.register(Resource("note", Note.__table__, immutable=("firewall_rule_id", "topic"), parent=CLUSTER_SVC_FIREWALL_RULE, schemas={"create": NoteCreate, "update": NoteUpdate, "out": NoteOut}))  # noqa: E501


# -- platform_svc ------------------------------------------------------------------


class PlatformNote(platform_models.Synced, platform_models.Base):
    __tablename__ = "notes"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    cluster_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("clusters.id"))
    firewall_rule_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("firewall_rules.id"), index=True)
    topic: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(String(200))


class PublicNoteCreate(NoteFields):
    pass


class PublicNotePatch(platform_schemas.Patch, NoteMutableFields):
    pass


class PublicNoteOut(platform_schemas.SyncedOut):
    id = fields.UUID()
    cluster_id = fields.UUID()
    firewall_rule_id = fields.UUID()
    topic = fields.String()
    text = fields.String()


PLATFORM_RESOURCES.register(Resource("note", PlatformNote.__table__, immutable=KEY_REPLAY, parent=PLATFORM_FIREWALL_RULE, schemas={"create": PublicNoteCreate, "patch": PublicNotePatch, "out": PublicNoteOut}))  # noqa: E501


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
