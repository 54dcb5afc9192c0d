"""A resource whose cluster_svc model lacks a declared field: the service must refuse to start."""
from __future__ import annotations

import uuid

from marshmallow import fields
from sqlalchemy import ForeignKey, Uuid
from sqlalchemy.orm import Mapped, mapped_column

import cluster_svc.models as cluster_models
from shared.contract import FIREWALL_RULE
from shared.declaration import Declaration, Field

TAG = Declaration("tag", parent=FIREWALL_RULE, fields={"label": Field(fields.String)})


class Tag(cluster_models.Lifecycle, cluster_models.Base, declares=TAG):
    __tablename__ = "tags"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    cluster_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("clusters.id"))
    firewall_rule_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("firewall_rules.id"))
