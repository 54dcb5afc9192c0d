"""The reconciler process: everything ``platform-svc reconcile`` runs, assembled in one object.

:class:`ReconcilerProcess` builds, from :class:`ReconcilerOptions` and the
environment, what one reconciler process is made of: the client policy of
its pushes, its database pool, the :class:`~platform_svc.sync.Pusher`, the
lease that makes one of several reconcilers the one running the periodic
passes (:class:`~platform_svc.repair.Leadership`), those passes (drift repair,
purge), its metrics endpoint and the signals that stop it. Then it runs
them: :meth:`~ReconcilerProcess.drain` once (``reconcile --once``), or
:meth:`~ReconcilerProcess.run` until stopped.

The command line only turns its options into :class:`ReconcilerOptions`;
whatever starts a reconciler (``make run``, ``make run-ha``, the tests)
starts that command, so every reconciler is assembled here.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from platform_svc import Settings
from platform_svc.purge import purger
from platform_svc.passes import record_pass, this_process
from platform_svc.reconciler import ReconcilerSettings, count_failed, reconcile_once, run
from platform_svc.repair import LEADER_LEASE_SECONDS, Leadership, Periodic, Repairer, run_periodically
from platform_svc.sync import Pusher, RetryPolicy
from shared import config
from shared.cli import stop_on_signals
from shared.client import ClientPolicy
from shared.logs import configure_logging

# The periodic passes' thread gets this long to end its pass (after the page
# at hand) and give the lease back once the reconciler has stopped.
PERIODIC_JOIN_SECONDS = 60


@dataclass(frozen=True)
class ReconcilerOptions:
    """What ``platform-svc reconcile`` takes on its command line; the defaults are its defaults."""

    concurrency: int = 8  # calls in flight
    batch: int = 100  # creates one batch call sends at most
    max_backoff: float = 300.0  # the longest wait (seconds) before retrying a row after transient failures
    push_timeout: float = 10.0  # seconds to wait for cluster_svc's answer to one call
    repair_interval: float = 3600.0  # seconds between drift repair passes; 0: none
    purge_interval: float = 3600.0  # seconds between purge passes; 0: none
    leader_lease: float = LEADER_LEASE_SECONDS  # seconds the lease on the periodic passes lasts unless renewed
    metrics_port: int | None = None  # serve Prometheus metrics on this port; None: not at all
    metrics_host: str | None = None  # where the metrics are served; None: HOST, else 127.0.0.1

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


class ReconcilerProcess:
    """One reconciler process, assembled; :meth:`drain` or :meth:`run` it (once), :meth:`stop` it.

    Building it starts nothing and connects to nothing, but it takes over two
    things of the whole process: logging (as ``reconciler``, shared.logs),
    and its metrics, kept in its own memory (never in a gunicorn metrics
    directory that happens to be set in the environment).
    """

    def __init__(
        self,
        options: ReconcilerOptions = ReconcilerOptions(),
        settings: Settings | None = None,
        *,
        echo: Callable[..., Any] = click.echo,
    ) -> None:
        """``settings`` are read from the environment when not given (their pool size is
        the reconciler's own); ``echo(line, err=False)`` prints what the command prints.

        :raise ConfigError: a setting in the environment is missing or malformed
            (LOG_FORMAT, the platform's settings when not given, a RECONCILER_* timing).
        """
        # Before anything imports prometheus-client, which picks its storage then.
        os.environ.pop(config.MULTIPROC_DIR, None)
        configure_logging("reconciler")
        self.options = options
        self.echo = echo
        policy = options.client_policy()
        # A connection for each worker, the scheduler, the recovery watch, the
        # repair pass and the renewal of the lease.
        self.settings = dataclasses.replace(settings or Settings.from_env(), pool_size=options.concurrency + 4)
        self.reconciler_settings = ReconcilerSettings.from_env(
            batch=options.batch, concurrency=options.concurrency, longest_push=policy.longest_call()
        )
        self.pusher = Pusher(
            self.settings.database(), self.settings.client(policy), RetryPolicy(max_delay=options.max_backoff),
            horizon=self.settings.horizon,
        )
        self.leadership = Leadership(self.pusher.database, ttl=options.leader_lease)
        self.duties = self._duties()
        self.metrics_host = options.metrics_host or os.environ.get("HOST", "").strip() or "127.0.0.1"
        self._stop = threading.Event()
        self._stop_metrics: Callable[[], None] = lambda: None

    def drain(self) -> int:
        """Push what is due now, print what that did; return the exit status: 0, or 1 when rows are left failed.

        :raise OSError: the metrics port could not be bound.
        :raise sqlalchemy.exc.DBAPIError: the platform's database failed (a row's
            lease runs out, and it is pushed again later).
        """
        self._serve_metrics()
        try:
            states = reconcile_once(self.pusher, self.reconciler_settings)
            failed = count_failed(self.pusher)
        finally:
            self._stop_metrics()
        self.echo(_pushed_line(states))
        record_pass(self.pusher.database, "reconcile", this_process(), _pushed_line(states))
        if failed:
            self.echo(f"{_rows(failed)} {'is' if failed == 1 else 'are'} failed; see `platform-svc sync-status`.", err=True)
        return 1 if failed else 0

    def run(self) -> None:
        """Reconcile, and run the periodic passes while leading, until :meth:`stop`.

        From the main thread, SIGTERM and SIGINT (Ctrl-C) stop it too. Once
        stopped it finishes the pushes in flight, lets the pass at hand end
        after its page, gives the lease back, and returns.

        :raise OSError: the metrics port could not be bound (nothing else was started).
        """
        self._serve_metrics()
        if threading.current_thread() is threading.main_thread():
            stop_on_signals(self._stop)
        self.echo("reconciler running; Ctrl-C stops it.")
        periodic = None
        if self.duties:
            periodic = threading.Thread(
                target=run_periodically, args=(self.leadership, self.duties, self._stop), name="periodic", daemon=True
            )
            periodic.start()
        try:
            run(self.pusher, self.reconciler_settings, self._stop)
        finally:
            self._stop.set()  # whatever ended the reconciler ends the passes too
            if periodic is not None:
                periodic.join(timeout=PERIODIC_JOIN_SECONDS)
            self._stop_metrics()

    def stop(self) -> None:
        """Make :meth:`run` return once it has finished what it holds (from any thread)."""
        self._stop.set()

    def _duties(self) -> list[Periodic]:
        """The periodic passes whose interval is not 0, each with a client or database of its own making."""
        duties = []
        database, horizon = self.pusher.database, self.settings.horizon
        if self.options.repair_interval > 0:
            repairer = Repairer(database, self.settings.client(ClientPolicy(pool_size=1)), horizon=horizon)
            duties.append(
                Periodic("repair", self.options.repair_interval, lambda stop: repairer.run(stop=stop).summary())
            )
        if self.options.purge_interval > 0:
            purging = purger(database, horizon)
            duties.append(
                Periodic("purge", self.options.purge_interval, lambda stop: purging.run(stop=stop).summary())
            )
        return duties

    def _serve_metrics(self) -> None:
        """Serve this process's metrics and whether it leads, if a port is given (and say where).

        :raise OSError: the port could not be bound.
        """
        port = self.options.metrics_port
        if port is None:
            return
        # Imported only now: prometheus-client must come after the directory is dropped above.
        from platform_svc.sync_metrics import LeaderCollector
        from shared.clock import ClockCollector
        from shared.metrics import serve_process_metrics

        collectors = [LeaderCollector(self.leadership), ClockCollector(self.pusher.clock, measure=True)]
        self._stop_metrics = serve_process_metrics(port, self.metrics_host, collectors=collectors)
        self.echo(f"reconciler metrics on http://{self.metrics_host}:{port}/metrics")


def _pushed_line(states: Counter[str]) -> str:
    """``pushed 3 rows: 2 synced, 1 pending``, or ``pushed 0 rows`` (no dangling colon) when nothing went down."""
    pushed = sum(states.values())
    if not pushed:
        return "pushed 0 rows"
    return f"pushed {_rows(pushed)}: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))


def _rows(count: int) -> str:
    """``1 row``, ``2 rows``: what a person reads first is the number, and it should read right."""
    return f"{count} row" if count == 1 else f"{count} rows"
