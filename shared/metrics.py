"""The metrics both services and the reconciler expose (names are the contract).

Every metric counted in memory (counters, histograms) is defined here; the
gauges read from their source at each scrape are collectors beside what they
read (:mod:`platform_svc.operations.metrics`, :mod:`cluster_svc.tombstones`,
:mod:`shared.clock`), registered through :func:`serve_process_metrics` or the
app's metrics endpoint. This module is imported lazily (by :mod:`shared.observability` and :mod:`shared.counters`,
when an app is built or a counter first moves), never at import time of a
command-line module: prometheus-client picks its storage when first
imported, and under gunicorn it must see ``PROMETHEUS_MULTIPROC_DIR``
(set by ``serve`` before it forks, see :mod:`shared.cli`) so every worker
writes its counts to a file of its own that any worker's ``/metrics`` adds
up. A worker that dies leaves its file behind, so nothing it counted is lost.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

from shared.config import MULTIPROC_DIR

# The `*_created` series exist only outside multiprocess mode; leaving them
# out keeps one process's exposition shaped like the workers' one.
disable_created_metrics()

HTTP_REQUESTS = Counter(
    "http_requests_total", "HTTP requests answered, by route template and status.", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "http_request_duration_seconds",
    "Time from the start of a request's handling to its answer, by route template.",
    ["method", "route"],
)
IDEMPOTENT_CREATES = Counter(
    "idempotent_creates", "Create-or-return outcomes (a batch counts each item).", ["resource", "outcome"]
)
IDEMPOTENT_UPDATES = Counter(
    "idempotent_updates", "Updates applied, or stale and ignored (generation not newer).", ["resource", "outcome"]
)
IDEMPOTENT_DELETES = Counter(
    "idempotent_deletes", "Delete outcomes: deleted, already deleted (410), never seen (404).", ["resource", "outcome"]
)
SYNC_PUSHES = Counter(
    "sync_pushes", "Pushes to cluster_svc, inline or by the reconciler, by answer.", ["resource", "operation", "outcome"]
)
SYNC_REPAIRS = Counter("sync_repairs", "Drift found by repair passes, by finding.", ["resource", "finding"])


class ReadyCollector:
    """``ready``: 1 while the service is ready (``/readyz`` would answer 200), else 0; read at each scrape.

    ``/metrics`` keeps answering while the database is down (it serves the
    counters and leaves the database's gauges out), so whether a scrape
    succeeded says nothing about readiness: an alert on it needs this series,
    which runs the same check as ``/readyz`` (one ``SELECT 1``, at most a couple
    of seconds) whenever Prometheus scrapes.
    """

    def __init__(self, ready: Callable[[], bool]) -> None:
        self.ready = ready

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter((self._family(),))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        family.add_metric([], 1.0 if self.ready() else 0.0)
        return iter((family,))

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "ready", "1 while the service's database answers SELECT 1 within 2 s (/readyz answers 200), else 0."
        )


def multiprocess() -> bool:
    """True when this process writes its metrics to the shared directory (gunicorn workers)."""
    return bool(os.environ.get(MULTIPROC_DIR))


def check_storage() -> None:
    """:raise RuntimeError: the directory is set but prometheus-client was imported before it was."""
    if multiprocess() and values.ValueClass.__name__ == "MutexValue":
        raise RuntimeError(f"prometheus_client was imported before {MULTIPROC_DIR} was set; counts would be lost")


class _ThisProcess:
    """The default registry's metrics, as one collector of a scrape registry."""

    def collect(self):
        return REGISTRY.collect()


def scrape_registry(collectors: Iterable[object] = ()) -> CollectorRegistry:
    """What ``/metrics`` serves: every worker's counts (or this process's), plus ``collectors``.

    Built once per app; the multiprocess collector reads the workers' files at
    each scrape, and ``collectors`` (reading the database, say) run then too.
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    for collector in collectors:
        registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The Prometheus text format of a registry, and its content type.

    Labelled 0.0.4, the version every Prometheus 2.x reads (the text is the same).
    """
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4


def serve_process_metrics(port: int, host: str, collectors: Iterable[object] = ()) -> Callable[[], None]:
    """Serve this (single) process's metrics, and ``collectors``' (read at each scrape), on
    ``host:port`` from a daemon thread; return what stops that (and unregisters ``collectors``).

    :raise OSError: the port could not be bound.
    """
    from prometheus_client import start_http_server

    collectors = list(collectors)
    server, thread = start_http_server(port, addr=host)
    for collector in collectors:
        REGISTRY.register(collector)

    def stop() -> None:
        for collector in collectors:
            REGISTRY.unregister(collector)
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
