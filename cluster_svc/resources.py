"""The resources cluster_svc serves: one line each (see :mod:`shared.registry`).

Routes, metrics and listings are built from :data:`RESOURCES`; nothing else
in cluster_svc names a resource. Adding one is a model (with a migration),
its schemas and a line here (or in a module ``RESOURCE_MODULES`` names).
"""
from __future__ import annotations

from cluster_svc.models import Cluster, FirewallRule
from cluster_svc.schemas import (
    ClusterCreate,
    ClusterListArgs,
    ClusterOut,
    ClusterUpdate,
    FirewallRuleCreate,
    FirewallRuleOut,
    FirewallRuleUpdate,
)
from shared.registry import Registry, Resource

# The root resource's column naming the team that owns a whole tree (the bulk
# listings add it to every descendant, for callers that compare by team).
OWNER = "team_id"

RESOURCES = Registry()

CLUSTER = RESOURCES.register(Resource(
    "cluster", Cluster.__table__, immutable=("team_id", "region", "postgres_version"),
    schemas={"create": ClusterCreate, "update": ClusterUpdate, "out": ClusterOut, "list_args": ClusterListArgs},
    options={"filters": ("team_id",)},
))
FIREWALL_RULE = RESOURCES.register(Resource(
    "firewall_rule", FirewallRule.__table__, immutable=("cluster_id", "cidr"), parent=CLUSTER,
    schemas={"create": FirewallRuleCreate, "update": FirewallRuleUpdate, "out": FirewallRuleOut},
))
