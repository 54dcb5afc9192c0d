"""Which refusals a skewed clock explains (retried) and which stand (the row fails), judged on the
platform database's time: a genuine 410 id_expired or 422 still fails a row when the clocks are right."""
from __future__ import annotations

import time
import uuid

import pytest

from platform_svc.models import RESOURCES
from platform_svc.push.skew import judged_for_skew
from shared.client import Answer, Operation, Outcome
from shared.horizon import Horizon
from tooling.testing import uuid7_ago

HORIZON = Horizon(30 * 86400)
CLUSTER, RULE = RESOURCES["cluster"], RESOURCES["firewall_rule"]


def refusal(status: int, code: str, operation: Operation = Operation.CREATE) -> Answer:
    return Answer(Outcome.PERMANENT, status, {"status": status, "code": code}, f"POST /v1/clusters: {status} {code}",
                  operation)


def judged(answer: Answer, row: dict, resource=CLUSTER) -> Answer:
    return judged_for_skew(resource, row, answer, horizon=HORIZON, database_now=time.time)


def test_an_id_from_the_future_is_retried_whatever_the_clocks():
    answer = judged(refusal(422, "id_from_the_future"), {"id": uuid7_ago(0)})
    assert answer.outcome is Outcome.TRANSIENT and "clock is behind" in answer.reason


def test_any_other_422_still_fails_the_row():
    assert judged(refusal(422, "validation_error"), {"id": uuid7_ago(0)}).outcome is Outcome.PERMANENT


@pytest.mark.parametrize("operation", [Operation.CREATE, Operation.UPDATE])
def test_id_expired_for_an_id_the_platform_database_holds_young_is_cluster_svc_clock_and_is_retried(operation):
    answer = judged(refusal(410, "id_expired", operation), {"id": uuid7_ago(60)})
    assert answer.outcome is Outcome.TRANSIENT and "clock is ahead" in answer.reason


def test_id_expired_for_an_id_older_than_the_horizon_on_the_platform_database_still_fails_the_row():
    answer = judged(refusal(410, "id_expired"), {"id": uuid7_ago(31 * 86400)})
    assert answer.outcome is Outcome.PERMANENT


def test_id_expired_for_a_rule_whose_cluster_id_expired_still_fails_the_row():
    row = {"id": uuid7_ago(60), "cluster_id": uuid7_ago(31 * 86400)}
    assert judged(refusal(410, "id_expired"), row, RULE).outcome is Outcome.PERMANENT


def test_the_database_clock_is_read_only_for_an_id_expired_refusal():
    def no_query():
        raise AssertionError("asked the database for its time")

    for answer in (refusal(422, "id_from_the_future"), refusal(409, "id_conflict"), refusal(410, "gone")):
        judged_for_skew(CLUSTER, {"id": uuid.uuid4()}, answer, horizon=HORIZON, database_now=no_query)


def test_ids_minted_together_are_ordered_and_a_clock_set_back_is_followed(monkeypatch):
    """A clock that ran ahead and is corrected mints IDs of the corrected time at once (the uuid6
    package's uuid7() went on minting the future ones, refused downstream as from the future)."""
    from platform_svc.api import services
    from shared.horizon import uuid7_millis

    now = [1_800_000_000_000_000_000]  # nanoseconds
    monkeypatch.setattr(services.time, "time_ns", lambda: now[0])
    burst = [services.new_id() for _ in range(5000)]  # more than a millisecond's counter holds
    assert burst == sorted(burst) and len(set(burst)) == len(burst)

    now[0] -= 600 * 10**9  # set back 10 minutes: followed
    corrected = services.new_id()
    assert uuid7_millis(corrected) == now[0] // 10**6
    now[0] -= 10**8  # and back a tenth of a second more (a slew, a small step): still after the last one
    following = services.new_id()
    assert following > corrected and uuid7_millis(following) == uuid7_millis(corrected)
