"""Counting the outcomes the metrics contract names, for views, the pusher and repair.

Callers say what happened (``count_create("cluster", "replayed")``, the resource by its registry key); this
module knows how that is recorded, so no view or service imports
prometheus-client. The metrics module is loaded on the first count (see
:mod:`shared.metrics` for why not at import), and each label combination's
child is looked up once and kept, so counting costs a dict lookup and an
increment.
"""
from __future__ import annotations

import enum
from typing import Any

CREATE_OUTCOMES = ("created", "replayed", "conflict", "gone", "expired")
UPDATE_OUTCOMES = ("applied", "stale")
DELETE_OUTCOMES = ("deleted", "already_deleted", "never_seen")
PUSH_OPERATIONS = ("create", "update", "delete")
PUSH_OUTCOMES = ("done", "transient", "permanent")
REPAIR_FINDINGS = ("missing", "behind", "ahead", "diverged", "undeleted", "deleted_downstream", "orphan")

# The values each metric's labels after ``resource`` may take, in the order of
# its labels: a typo must fail loudly in tests rather than start a series no
# dashboard shows (and docs/observability.md lists them, tests/test_metrics_contract.py).
ALLOWED_VALUES = {
    "IDEMPOTENT_CREATES": (CREATE_OUTCOMES,),
    "IDEMPOTENT_UPDATES": (UPDATE_OUTCOMES,),
    "IDEMPOTENT_DELETES": (DELETE_OUTCOMES,),
    "SYNC_PUSHES": (PUSH_OPERATIONS, PUSH_OUTCOMES),
    "SYNC_REPAIRS": (REPAIR_FINDINGS,),
}
_children: dict[tuple[str, tuple[str, ...]], Any] = {}


def count_create(resource: str, outcome: str) -> None:
    """One create-or-return answered (each item of a batch counts once)."""
    _count("IDEMPOTENT_CREATES", resource, outcome)


def count_update(resource: str, outcome: str) -> None:
    _count("IDEMPOTENT_UPDATES", resource, outcome)


def count_delete(resource: str, outcome: str) -> None:
    _count("IDEMPOTENT_DELETES", resource, outcome)


def count_push(resource: str, operation: Any, outcome: Any) -> None:
    """One push to cluster_svc answered (``operation``/``outcome``: strings or enums of them)."""
    _count("SYNC_PUSHES", resource, _value(operation), _value(outcome))


def count_repair(resource: str, finding: str) -> None:
    """One drift finding (see REPAIR_FINDINGS): of a repair pass, or (``ahead``) of a push whose
    answer showed cluster_svc holding a state the push did not set."""
    _count("SYNC_REPAIRS", resource, finding)


def _count(metric: str, resource: str, *labels: str) -> None:
    key = (metric, (resource, *labels))
    child = _children.get(key)
    if child is None:
        from shared import metrics

        for value, allowed in zip(labels, ALLOWED_VALUES[metric], strict=True):
            if value not in allowed:
                raise ValueError(f"{metric}: {value!r} is not one of {allowed}")

        child = _children[key] = getattr(metrics, metric).labels(resource, *labels)
    child.inc()


def _value(label: Any) -> str:
    return label.value if isinstance(label, enum.Enum) else label
