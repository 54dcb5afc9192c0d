"""The resources the product ships, declared once (:mod:`shared.declaration`).

Both services import these declarations and derive their bodies from them;
the public body platform_svc accepts is exactly what it later sends to
cluster_svc, less the fields the platform owns. Each service adds a model
(and a migration) per declaration: see docs/design.md, "Adding a resource".
"""
from __future__ import annotations

from marshmallow import fields, validate

from shared.declaration import CIDR, INTEGER, Declaration, Field, varchar
from shared.openapi import NO_NUL, FullMatch
from shared.schemas import IPNetwork, StrictInteger, Text

REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1")
PLANS = ("hobby-0", "standard-2", "standard-4", "memory-8")

# Portable (ECMA-262) in the document; matched against the whole string, so a
# trailing newline is refused as well.
CLUSTER_NAME = FullMatch(r"^[a-z0-9-]{1,63}$", error="Must be 1 to 63 characters of a-z, 0-9 and '-'.")

CLUSTER = Declaration(
    "cluster",
    owner="team_id",
    fields={
        "name": Field(Text, varchar(63), validate=CLUSTER_NAME),
        "region": Field(fields.String, varchar(32), validate=validate.OneOf(REGIONS), immutable=True),
        "postgres_version": Field(StrictInteger, INTEGER, validate=validate.Range(14, 17), immutable=True),
        "plan": Field(fields.String, varchar(32), validate=validate.OneOf(PLANS)),
        "storage_gb": Field(StrictInteger, INTEGER, validate=validate.Range(10, 4096)),
    },
)

FIREWALL_RULE = Declaration(
    "firewall_rule",
    parent=CLUSTER,
    fields={
        "cidr": Field(IPNetwork, CIDR, immutable=True),
        "description": Field(Text, varchar(255), metadata={"pattern": NO_NUL}, default=""),  # at most 255: its column
    },
)

# A valid create body of each root resource, as a caller sends it: what a drill makes its objects
# of (platform_svc.api.drill).
EXAMPLES = {
    CLUSTER.key: {"name": "drill-id-conflict", "region": REGIONS[0], "postgres_version": 16, "plan": PLANS[0],
                  "storage_gb": 10},
}
