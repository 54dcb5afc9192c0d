"""Refusals that only a skewed clock explains are transient, never a row's failure.

cluster_svc judges an ID's age on its own host's clock. Two of its refusals
are permanent when that clock is right, and wrong when it is not:

- 422 ``id_from_the_future``: the ID is more than 5 minutes ahead of its clock.
  Every ID the platform stores was checked against the platform database's
  clock when it was stored (:func:`platform_svc.api.services.create_objects`), so
  such an answer means cluster_svc's clock is behind, or ours ran ahead
  undetected for a moment. Either way time cures it: an ID from the future
  is valid once its time has come. Always transient.
- 410 ``id_expired`` on a create or update: the ID (or its parent's) is older
  than the horizon on cluster_svc's clock. It is judged again on the
  platform database's clock (this host's corrected by the offset it
  measured, :meth:`shared.clock.ClockWatch.database_now`), the clock purge
  reads: if the ID is expired there too, the refusal stands and the row
  fails, as it always did (an outage longer than the horizon); if not, only
  cluster_svc's clock (ahead) can have expired it, and the row is tried again.
  The platform database is the judge because it is the clock every ID was
  checked against when it was stored, and the one its purge reads: no
  cluster_svc answer, which carries only cluster_svc's own view, can tell a
  skewed clock from a right one.

A delete answered ``id_expired`` is a confirmed delete already (nothing is
held there): it is not judged here.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from shared.client import Answer, Operation, Outcome
from shared.horizon import Horizon
from shared.registry import Resource


def judged_for_skew(
    resource: Resource, row: Mapping[str, Any], answer: Answer, *, horizon: Horizon,
    database_now: Callable[[], float],
) -> Answer:
    """``answer`` as it stands, or as TRANSIENT when only a skewed clock explains its refusal.

    ``database_now`` is asked only for an ``id_expired`` refusal (they are rare).
    """
    if answer.outcome is not Outcome.PERMANENT or answer.operation not in (Operation.CREATE, Operation.UPDATE):
        return answer
    code = answer.body.get("code") if isinstance(answer.body, Mapping) else None
    if answer.status == 422 and code == "id_from_the_future":
        return replace(answer, outcome=Outcome.TRANSIENT, reason=(
            f"{answer.reason}: cluster_svc's clock is behind the one this ID was checked against; "
            "trying again (an ID from the future is valid once its time has come)"))
    if answer.status == 410 and code == "id_expired":
        now = database_now()
        ids = [row["id"], *(row[column] for column in resource.scope_columns if column in row)]
        if not any(horizon.expired(object_id, now) for object_id in ids):
            return replace(answer, outcome=Outcome.TRANSIENT, reason=(
                f"{answer.reason}: not expired by the platform database's clock, so cluster_svc's clock is "
                "ahead; trying again"))
    return answer
