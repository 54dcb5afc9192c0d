"""What the chaos scenarios run on the pair (:class:`tooling.pair.Pair`, with the
fault proxy between the two services): their sizes, their data, and bursts of
public calls on a thread pool the test can follow.
"""
from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from shared.contract import PLANS, REGIONS
from tests.chaos.convergence import install_audit, read_audit
from tooling import embedded_pg
from tooling.pair import Pair, PublicApi, expect
from tooling.testing import fresh_database

REPAIR_INTERVAL = "1"  # seconds: the periodic pass, as an operator would not have to run it
# Seconds between purge passes on both sides, beside every pair (``cluster-svc purge --every``,
# and each reconciler's ``--purge-interval``): within a second of an ID passing the horizon.
PURGE_EVERY = 0.5


@dataclass(frozen=True)
class Scale:
    """How big each scenario is; every size asserts the same things."""

    name: str
    creates: int  # scenario 1: public cluster creates (a firewall rule on every third)
    objects: int  # scenario 2: clusters then updated, some deleted
    burst: int  # scenario 3: creates during the crashes
    backlog: int  # scenario 5: clusters waiting (a firewall rule on every fourth)
    reconcilers: int  # scenario 5: reconciler processes at once
    fuzz_examples: int  # scenario 6: generated requests per operation and mode
    outage_seconds: float  # scenario 7: how long cluster_svc stays down
    outage_writes: int  # scenario 7: public writes during it
    restart_burst: int  # scenario 8: public creates while platform's PostgreSQL restarts
    # ID_HORIZON_SECONDS of every pair but scenario 2's: longer than any scenario's module runs,
    # so nothing a scenario still needs expires (a create pending through the long outage, the
    # objects a restore brings back or takes away); purge runs beside it all the same.
    horizon: int
    # Scenario 2's horizon, where purge must remove every deleted object: it creates its objects
    # first (a create left pending by a failed inline push is pushed within seconds, well inside
    # this), then only updates and deletes them, by when their IDs are past it.
    short_horizon: int
    threads: int = 8  # public clients at once


SCALES = {
    "ci": Scale(
        "ci", creates=100, objects=60, burst=80, backlog=300, reconcilers=4, fuzz_examples=6,
        outage_seconds=4, outage_writes=40, restart_burst=40, horizon=300, short_horizon=15,
    ),
    "full": Scale(
        "full", creates=600, objects=300, burst=500, backlog=3000, reconcilers=6, fuzz_examples=60,
        outage_seconds=120, outage_writes=1000, restart_burst=300, horizon=3600, short_horizon=60,
    ),
}


def scale_from_env() -> Scale:
    name = os.environ.get("CHAOS_SCALE", "").strip() or "ci"
    if name not in SCALES:
        raise ValueError(f"CHAOS_SCALE must be one of {', '.join(SCALES)}, got {name!r}")
    return SCALES[name]


def cluster_body(rng: random.Random, index: int) -> dict[str, Any]:
    return {
        "name": f"c{index}-{rng.randrange(10**6)}",
        "region": rng.choice(REGIONS),
        "postgres_version": rng.randint(14, 17),
        "plan": rng.choice(PLANS),
        "storage_gb": rng.randint(10, 4096),
    }


def rules_path(cluster_id: str) -> str:
    """The public collection of a cluster's firewall rules."""
    return f"/v1/clusters/{cluster_id}/firewall-rules"


def rule_body(rng: random.Random) -> dict[str, Any]:
    return {
        "cidr": f"10.{rng.randrange(256)}.{rng.randrange(256)}.0/24",
        "description": rng.choice(["office", "vpn ☂", "it's 'quoted'", ""]) + f" {rng.randrange(10**6)}",
    }


# -- the public side -----------------------------------------------------------------


class Burst:
    """Calls run on a thread pool in the background; the test follows their progress."""

    def __init__(self, calls: list[Callable[[], Any]], threads: int) -> None:
        self._calls = calls
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="burst")
        self._outcomes: list[Any] = []  # in the order the calls finished
        self._progress = threading.Condition()
        self._futures: list = []

    def start(self) -> Burst:
        self._futures = [self._pool.submit(self._run, call) for call in self._calls]
        return self

    def _run(self, call: Callable[[], Any]) -> Any:
        outcome: Any = None
        try:
            outcome = call()
            return outcome
        except Exception as exc:
            outcome = exc
            raise
        finally:
            with self._progress:
                self._outcomes.append(outcome)
                self._progress.notify_all()

    def wait_finished(self, count: int, timeout: float = 120) -> None:
        """Wait until ``count`` calls have returned (or raised)."""
        self.wait_until(lambda outcome: True, count, timeout)

    def wait_until(self, predicate: Callable[[Any], bool], count: int, timeout: float = 120) -> None:
        """Wait until ``count`` calls have finished with an outcome ``predicate`` accepts."""
        with self._progress:
            done = lambda: sum(1 for outcome in self._outcomes if predicate(outcome)) >= count  # noqa: E731
            assert self._progress.wait_for(done, timeout), (
                f"fewer than {count} calls finished as wanted within {timeout} s"
            )

    def count(self, predicate: Callable[[Any], bool]) -> int:
        with self._progress:
            return sum(1 for outcome in self._outcomes if predicate(outcome))

    def results(self, timeout: float = 300) -> list[Any]:
        """Each call's return value, or the exception it raised."""
        self.wait_finished(len(self._calls), timeout)
        self._pool.shutdown()
        return [future.exception() or future.result() for future in self._futures]


def run_all(calls: list[Callable[[], Any]], threads: int) -> list[Any]:
    return Burst(calls, threads).start().results()


def dump_partway(pair: Any, calls: list[Callable[[], Any]], threads: int, *, database_url: str, after: int) -> Path:
    """Run ``calls`` as a burst with a reconciler pushing, dump ``database_url`` once
    ``after`` of them have finished, let the rest finish, and converge: both sides
    are exact, and the dump is older than the database. Return the dump."""
    dump = pair.workdir / "partway.dump"
    with pair.reconciler("--concurrency", "4"):  # the default interval: no repair pass within this phase
        burst = Burst(calls, threads).start()
        burst.wait_finished(after)
        embedded_pg.dump(database_url, dump)
        results = burst.results()
    assert not [r for r in results if isinstance(r, BaseException)]
    pair.converge()
    assert pair.compare().exact  # all written and synced, before the restore
    return dump


def in_turn(api: PublicApi, calls: list[tuple[str, str, dict | None, tuple[int, ...]]]) -> None:
    """One user's calls, each after the previous answered; a create's ID fills ``{id}`` in the next paths."""
    created = None
    for method, path, body, statuses in calls:
        answer = expect(api.call(method, path.format(id=created), json=body), *statuses)
        if method == "POST" and created is None:
            created = answer["id"]


SEED = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**31))


def seed_for(name: str) -> int:
    """A seed of its own for each use, all derived from the run's seed."""
    return random.Random(f"{SEED}:{name}").randrange(2**31)


def running_pair(
    request, tmp_path_factory, *, platform_server: str, cluster_server: str, horizon: int | None = None,
    purge: bool = True,
):
    """Both services as processes on fresh databases of these servers, with the fault proxy between them.

    Purge runs on both sides as an operator runs it (``cluster-svc purge --every``
    beside the pair, every reconciler with ``--purge-interval``, both every
    :data:`PURGE_EVERY` seconds), unless ``purge`` is false; both services'
    horizon is ``horizon`` seconds (the scale's unless given). Both databases
    are audited (see :func:`install_audit`) from the start, and after the
    module's scenarios neither may have lost a row purge may not remove.
    """
    cluster_db_url = fresh_database(cluster_server, "chaos_cluster", migrations=CLUSTER_MIGRATIONS)
    platform_db_url = fresh_database(platform_server, "chaos_platform", migrations=PLATFORM_MIGRATIONS)
    install_audit(cluster_db_url)
    install_audit(platform_db_url)
    with Pair(
        platform_db_url=platform_db_url,
        cluster_db_url=cluster_db_url,
        workdir=tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]),
        env={"ID_HORIZON_SECONDS": str(horizon or scale_from_env().horizon)},
        proxy=True,
        purge_every=PURGE_EVERY if purge else None,
    ) as pair:
        yield pair
        # Whatever the module's scenarios did: purge removed nothing on either side but deleted
        # rows whose ID was past the horizon.
        for platform in (False, True):
            audit = read_audit(pair, platform=platform)
            assert audit.hard_deletes == 0, f"{'platform' if platform else 'cluster_svc'}: {audit}"
