"""The rate limit's windows for tests: seconds of the database's clock, which the limit counts in.

A test that needs its requests inside one window starts them early in a second and checks, after,
that the database's second did not change meanwhile; if it did, it tries again in the next.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text

from tooling.testing import wait_for


def database_second(engine: Engine) -> tuple[int, float]:
    """The database's current second (its clock, which the rate limit's windows count in), and how
    far into it."""
    with engine.connect() as conn:
        now = float(conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar())
    return int(now), now % 1


def in_one_database_second(
    engine: Engine, attempt: Callable[[], Any], *, stayed: Callable[[Any, int], bool] | None = None, tries: int = 10,
) -> tuple[Any, int]:
    """``attempt()`` started early in a second of the database's clock, again until a run stayed
    inside that second (by default: the database's second had not changed once it returned;
    ``stayed(result, second)`` may judge it instead); its result and that second. Between tries
    the database's clock passes the second a failed run may have reached into.

    :raise AssertionError: no run fitted in ``tries``.
    """
    for _ in range(tries):
        second = wait_for(lambda: (now := database_second(engine))[1] <= 0.3 and now, poll=0.02,
                          what="early in a database second")[0]
        result = attempt()
        if stayed(result, second) if stayed is not None else database_second(engine)[0] == second:
            return result, second
        wait_for(lambda: database_second(engine)[0] > second + 1, what="the next window", poll=0.05)
    raise AssertionError(f"no run of {attempt} fitted in one second of the database's clock in {tries} tries")
