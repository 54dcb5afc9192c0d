"""A third resource the product does not ship: notes on a firewall rule (two levels deep).

Loaded into real service processes through ``RESOURCE_MODULES=tests.e2e.notes``,
exactly as a deployment would add a resource of its own: one declaration
(with each field's column), a one-line model per service (the services derive
their tables, bodies, routes and pushes from the declaration), and the tables
a migration per side would create. Never imported by the
test process itself (its models join the services' metadata, which the
migration tests compare with the migrations); :func:`create_tables` runs in a
subprocess of its own.
"""
from __future__ import annotations

import sys

from marshmallow import fields, validate
from sqlalchemy import create_engine

import cluster_svc.models as cluster_models
import platform_svc.models as platform_models
from shared.contract import FIREWALL_RULE
from shared.declaration import Declaration, Field, varchar
from shared.schemas import Text

NOTE = Declaration(
    "note",
    parent=FIREWALL_RULE,
    fields={
        "topic": Field(fields.String, varchar(16), validate=validate.OneOf(("audit", "owner", "expiry")), immutable=True),
        "text": Field(Text, varchar(200), default=""),
    },
)


class Note(cluster_models.Lifecycle, cluster_models.Base, declares=NOTE):
    """cluster_svc's model: its table, columns, CHECK and index derived from the declaration."""


class PlatformNote(platform_models.Object, declares=NOTE):
    """platform_svc's model: the same columns, with the sync bookkeeping."""


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
