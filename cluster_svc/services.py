"""cluster_svc's rules, on top of the shared create-or-return mechanism.

Each function takes the session as ``db_session`` and never commits.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import RowMapping

from cluster_svc.models import CLUSTERS, FIREWALL_RULES
from shared.idempotent import (
    CreateResult,
    Deletion,
    apply_update,
    create_or_return,
    create_or_return_many,
    get_live,
    list_live,
    mark_deleted,
)


def create_cluster(*, db_session: Connection, cluster_in: Mapping[str, Any]) -> tuple[RowMapping, bool]:
    """:raise Gone, IdConflict: see :func:`shared.idempotent.create_or_return`."""
    return create_or_return(db_session=db_session, resource=CLUSTERS, values=cluster_in)


def create_clusters(*, db_session: Connection, clusters_in: Sequence[Mapping[str, Any]]) -> list[CreateResult]:
    """Each cluster's create-or-return, in order; a refused item does not stop the others."""
    return create_or_return_many(db_session=db_session, resource=CLUSTERS, items=clusters_in)


def get_cluster(*, db_session: Connection, cluster_id: uuid.UUID) -> RowMapping:
    """:raise NotFound, Gone:"""
    return get_live(db_session=db_session, resource=CLUSTERS, object_id=cluster_id)


def list_clusters(
    *,
    db_session: Connection,
    team_id: uuid.UUID | None,
    limit: int,
    after: uuid.UUID | None,
    include_deleted: bool = False,
) -> tuple[Sequence[RowMapping], uuid.UUID | None]:
    filters = {"team_id": team_id} if team_id is not None else {}
    return list_live(
        db_session=db_session,
        resource=CLUSTERS,
        filters=filters,
        limit=limit,
        after=after,
        include_deleted=include_deleted,
    )


def update_cluster(
    *, db_session: Connection, cluster_id: uuid.UUID, cluster_in: Mapping[str, Any]
) -> tuple[RowMapping, bool]:
    """:raise NotFound, Gone:"""
    values = dict(cluster_in)
    generation = values.pop("generation")
    return apply_update(
        db_session=db_session, resource=CLUSTERS, object_id=cluster_id, generation=generation, values=values
    )


def delete_cluster(*, db_session: Connection, cluster_id: uuid.UUID) -> Deletion:
    """Tombstone the cluster and its firewall rules."""
    return mark_deleted(db_session=db_session, resource=CLUSTERS, object_id=cluster_id)


def create_firewall_rule(
    *, db_session: Connection, cluster_id: uuid.UUID, rule_in: Mapping[str, Any]
) -> tuple[RowMapping, bool]:
    """:raise NotFound, Gone: the cluster is missing or deleted (or the rule is).
    :raise IdConflict: the rule ID exists with another cluster or CIDR."""
    values = {**rule_in, "cluster_id": cluster_id}
    return create_or_return(db_session=db_session, resource=FIREWALL_RULES, values=values)


def create_firewall_rules(
    *, db_session: Connection, cluster_id: uuid.UUID, rules_in: Sequence[Mapping[str, Any]]
) -> list[CreateResult]:
    """Each rule's create-or-return under the cluster, in order. A missing or
    deleted cluster refuses every new rule item by item (404 or 410), as their
    single creates would."""
    items = [{**rule_in, "cluster_id": cluster_id} for rule_in in rules_in]
    return create_or_return_many(db_session=db_session, resource=FIREWALL_RULES, items=items)


def get_firewall_rule(*, db_session: Connection, cluster_id: uuid.UUID, rule_id: uuid.UUID) -> RowMapping:
    """:raise NotFound, Gone:"""
    return get_live(
        db_session=db_session, resource=FIREWALL_RULES, object_id=rule_id, scope={"cluster_id": cluster_id}
    )


def list_firewall_rules(
    *, db_session: Connection, cluster_id: uuid.UUID, limit: int, after: uuid.UUID | None
) -> tuple[Sequence[RowMapping], uuid.UUID | None]:
    """:raise NotFound, Gone: the cluster is missing or deleted."""
    get_cluster(db_session=db_session, cluster_id=cluster_id)
    return list_live(
        db_session=db_session, resource=FIREWALL_RULES, filters={"cluster_id": cluster_id}, limit=limit, after=after
    )


def list_all_firewall_rules(
    *, db_session: Connection, limit: int, after: uuid.UUID | None, include_deleted: bool = False
) -> tuple[Sequence[RowMapping], uuid.UUID | None]:
    """Every cluster's rules in one id order, each with its cluster's ``team_id``."""
    return list_live(
        db_session=db_session,
        resource=FIREWALL_RULES,
        filters={},
        limit=limit,
        after=after,
        include_deleted=include_deleted,
        parent_columns=("team_id",),
    )


def update_firewall_rule(
    *, db_session: Connection, cluster_id: uuid.UUID, rule_id: uuid.UUID, rule_in: Mapping[str, Any]
) -> tuple[RowMapping, bool]:
    """:raise NotFound, Gone:"""
    values = dict(rule_in)
    generation = values.pop("generation")
    return apply_update(
        db_session=db_session,
        resource=FIREWALL_RULES,
        object_id=rule_id,
        generation=generation,
        values=values,
        scope={"cluster_id": cluster_id},
    )


def delete_firewall_rule(*, db_session: Connection, cluster_id: uuid.UUID, rule_id: uuid.UUID) -> Deletion:
    """:raise NotFound: the cluster does not exist."""
    return mark_deleted(
        db_session=db_session, resource=FIREWALL_RULES, object_id=rule_id, scope={"cluster_id": cluster_id}
    )
