"""The resources platform_svc serves and pushes down: one line each (see :mod:`shared.registry`).

The public routes, the reconciler, repair, ``sync-status`` and the
``sync_rows`` gauge all iterate :data:`RESOURCES`. Each resource is
cluster_svc's resource of the same key; what is pushed down is derived from
its schemas (:mod:`platform_svc.sync`).
"""
from __future__ import annotations

from platform_svc.models import Cluster, FirewallRule
from platform_svc.schemas import (
    ClusterCreate,
    ClusterOut,
    ClusterPatch,
    FirewallRuleCreate,
    FirewallRuleOut,
    FirewallRulePatch,
)
from shared.registry import Registry, Resource

# For the create-or-return mechanism: the platform invents every ID, so what a
# replay (same Idempotency-Key) must repeat is the body it first came with.
KEY_REPLAY = ("request_fingerprint",)

RESOURCES = Registry()

CLUSTER = RESOURCES.register(Resource(
    "cluster", Cluster.__table__, immutable=KEY_REPLAY,
    schemas={"create": ClusterCreate, "patch": ClusterPatch, "out": ClusterOut},
))
FIREWALL_RULE = RESOURCES.register(Resource(
    "firewall_rule", FirewallRule.__table__, immutable=KEY_REPLAY, parent=CLUSTER,
    schemas={"create": FirewallRuleCreate, "patch": FirewallRulePatch, "out": FirewallRuleOut},
))
