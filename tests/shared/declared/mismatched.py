"""A resource whose cluster_svc model stores a declared field in a column of another length: the
service must refuse to start."""
from __future__ import annotations

from marshmallow import fields
from sqlalchemy import String
from sqlalchemy.orm import mapped_column

import cluster_svc.models as cluster_models
from shared.contract import FIREWALL_RULE
from shared.declaration import Declaration, Field, varchar

TAG = Declaration("tag", parent=FIREWALL_RULE, fields={"label": Field(fields.String, varchar(40))})


class Tag(cluster_models.Lifecycle, cluster_models.Base, declares=TAG):
    label = mapped_column(String(10))  # not the declared varchar(40)
