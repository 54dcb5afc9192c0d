"""What one reconciler process runs with: ``platform-svc reconcile``'s options (the defaults here are
its defaults) and the ``RECONCILER_*`` timings tests shorten, in one object the manager builds."""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from idempotent_pair_client.transport import ClientPolicy

from platform_svc.operations.leadership import LEASE_SECONDS
from shared import config


@dataclass(frozen=True)
class ReconcilerSettings:
    concurrency: int = 8  # units of work (calls) in flight at most
    batch: int = 100  # creates one batch call sends at most
    max_backoff: float = 300.0  # the longest wait (seconds) before retrying a row after transient failures
    push_timeout: float = 10.0  # seconds to wait for cluster_svc's answer to one call
    repair_interval: float = 3600.0  # seconds between drift repair passes; 0: none
    purge_interval: float = 3600.0  # seconds between purge passes; 0: none
    leader_lease: float = LEASE_SECONDS  # seconds the lease on the periodic passes lasts unless renewed
    metrics_port: int | None = None  # serve Prometheus metrics on this port; None: not at all
    metrics_host: str | None = None  # where the metrics are served; None: HOST, else 127.0.0.1
    # The lease on a claimed row outlasts its push (:attr:`longest_push`) by this much, so a push
    # always ends while its row is still leased: no two pushers ever send one row at the same moment.
    lease_margin: float = 5.0
    idle_interval: float = 1.0  # rest when nothing is due
    probe_interval: float = 1.0  # how often a suspected outage is probed

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: Any) -> ReconcilerSettings:
        """``given`` (the command's options), and the timings ``RECONCILER_LEASE_MARGIN_SECONDS``,
        ``RECONCILER_IDLE_SECONDS`` and ``RECONCILER_PROBE_SECONDS`` (the defaults above when unset).

        :raise ConfigError: one is set but not a positive number.
        """
        timings = {
            "lease_margin": config.seconds("RECONCILER_LEASE_MARGIN_SECONDS", cls.lease_margin, environ),
            "idle_interval": config.seconds("RECONCILER_IDLE_SECONDS", cls.idle_interval, environ),
            "probe_interval": config.seconds("RECONCILER_PROBE_SECONDS", cls.probe_interval, environ),
        }
        return cls(**{**timings, **given})

    def client_policy(self) -> ClientPolicy:
        """How hard one push tries: once more, briefly.

        Each row has its own backoff, so a push never sleeps long on a
        Retry-After: a worker is not held while a row could wait.
        """
        return ClientPolicy(
            connect_timeout=1.0,
            read_timeout=self.push_timeout,
            retries=1,
            backoff_max=1.0,
            retry_after_max=2,
            pool_size=self.concurrency + 1,
        )

    @functools.cached_property
    def longest_push(self) -> float:
        """Seconds one push can take, retries included."""
        return self.client_policy().longest_call()

    @functools.cached_property
    def lease(self) -> timedelta:
        """How long a claimed row stays this reconciler's."""
        return timedelta(seconds=self.longest_push + self.lease_margin)
