"""The reconciler process: everything ``platform-svc reconcile`` runs, assembled in one object.

:class:`ReconcilerProcess` builds, from the command's options and the environment, one
:class:`~platform_svc.reconciler.settings.ReconcilerSettings` and what one reconciler process is
made of: its database pool, the :class:`~platform_svc.push.pusher.UnitPusher` (with the client policy
of its pushes), the controller (:mod:`platform_svc.reconciler.controller`), the lease that makes
one of several reconcilers the one running the periodic passes
(:class:`~platform_svc.operations.leadership.Leadership`), those passes (drift repair, purge), its
metrics endpoint and the signals that stop it. Then it runs them: :meth:`~ReconcilerProcess.drain`
once (``reconcile --once``), or :meth:`~ReconcilerProcess.run` until stopped. It starts every
thread the process runs beside the controller's own workers.

Whatever starts a reconciler (``make run``, ``make run-ha``, the tests) starts that command, so
every reconciler is assembled here.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import click
from idempotent_pair_client.transport import ClientPolicy

from platform_svc.operations.copies import RepairError
from platform_svc.operations.leadership import Leadership
from platform_svc.operations.passes import record_pass, this_process
from platform_svc.operations.purge import purger
from platform_svc.operations.repair import Repairer
from platform_svc.operations.runs import RepairRuns
from platform_svc.operations.sightings import Sightings
from platform_svc.models import RESOURCES
from platform_svc.push.pusher import PushPath, UnitPusher
from platform_svc.push.schedule import RetryPolicy
from platform_svc.reconciler.controller import Reconciler, count_failed
from platform_svc.reconciler.periodic import Periodic, run_periodically
from platform_svc.reconciler.settings import ReconcilerSettings
from platform_svc.settings import Settings
from shared import config
from shared.cli import stop_on_signals
from shared.logs import configure_logging

# How often the leader looks for repair runs asked for on the console.
REQUESTED_RUNS_INTERVAL = 1.0
# The periodic passes' thread gets this long to end its pass (after the page
# at hand) and give the lease back once the reconciler has stopped.
PERIODIC_JOIN_SECONDS = 60
WATCH_JOIN_SECONDS = 10


class ReconcilerProcess:
    """One reconciler process, assembled; :meth:`drain` or :meth:`run` it (once), :meth:`stop` it.

    Building it starts nothing and connects to nothing, but it takes over two
    things of the whole process: logging (as ``reconciler``, shared.logs),
    and its metrics, kept in its own memory (never in a gunicorn metrics
    directory that happens to be set in the environment).
    """

    def __init__(
        self,
        settings: ReconcilerSettings = ReconcilerSettings(),
        platform: Settings | None = None,
        *,
        echo: Callable[..., Any] = click.echo,
    ) -> None:
        """``platform`` (the service's settings) are read from the environment when not given
        (their pool size is the reconciler's own); ``echo(line, err=False)`` prints what the
        command prints.

        :raise ConfigError: a setting in the environment is missing or malformed
            (LOG_FORMAT, the platform's settings when not given).
        """
        # Before anything imports prometheus-client, which picks its storage then.
        os.environ.pop(config.MULTIPROC_DIR, None)
        configure_logging("reconciler")
        self.settings = settings
        self.echo = echo
        # A connection for each worker, the scheduler, the recovery watch, the
        # repair pass and the renewal of the lease.
        self.platform = dataclasses.replace(platform or Settings.from_env(), pool_size=settings.concurrency + 4)
        database = self.platform.database()
        self.sightings = Sightings(database, "reconciler")  # what its calls saw of cluster_svc, for the console
        self.pusher = UnitPusher(PushPath(
            database, self.sightings.watching(self.platform.client(settings.client_policy())),
            RetryPolicy(max_delay=settings.max_backoff), horizon=self.platform.horizon,
        ), RESOURCES)
        self.leadership = Leadership(database, ttl=settings.leader_lease)
        self.duties = self._duties()
        self.metrics_host = settings.metrics_host or os.environ.get("HOST", "").strip() or "127.0.0.1"
        self._stop = threading.Event()
        self._stop_metrics: Callable[[], None] = lambda: None

    @classmethod
    def from_options(cls, **options: Any) -> ReconcilerProcess:
        """The process ``platform-svc reconcile`` runs: its options (fields of
        :class:`ReconcilerSettings`, by the same names) and the environment.

        :raise ConfigError: a setting in the environment is missing or malformed.
        """
        return cls(ReconcilerSettings.from_env(**options))

    def drain(self) -> int:
        """Push what is due now, print what that did; return the exit status: 0, or 1 when rows are left failed.

        :raise OSError: the metrics port could not be bound.
        :raise sqlalchemy.exc.DBAPIError: the platform's database failed (a row's
            lease runs out, and it is pushed again later).
        """
        self._serve_metrics()
        try:
            states = Reconciler(self.pusher, self.settings, suspect=False).drain()
            failed = count_failed(self.pusher)
        finally:
            self._stop_metrics()
        self.echo(_pushed_line(states))
        record_pass(self.pusher.path.database, "reconcile", this_process(), _pushed_line(states))
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
        reconciler = Reconciler(self.pusher, self.settings, suspect=True)
        watch = _started(reconciler.watch.run, self._stop, self.settings.probe_interval, name="recovery")
        keeper = periodic = None
        if self.duties:
            keeper = _started(self.leadership.keep, self._stop, name="leader-lease")
            periodic = _started(run_periodically, self.leadership, self.duties, self._stop, name="periodic")
        try:
            reconciler.run(self._stop)
        finally:
            self._stop.set()  # whatever ended the reconciler ends the passes too
            watch.join(timeout=WATCH_JOIN_SECONDS)
            if periodic is not None:
                periodic.join(timeout=PERIODIC_JOIN_SECONDS)
                keeper.join(timeout=PERIODIC_JOIN_SECONDS)
                self.leadership.release()
            self._stop_metrics()

    def stop(self) -> None:
        """Make :meth:`run` return once it has finished what it holds (from any thread)."""
        self._stop.set()

    def _duties(self) -> list[Periodic]:
        """The periodic passes whose interval is not 0, each with a client or database of its own making;
        and, when there is any, the console's real repair runs (which need the lease those passes hold)."""
        duties = []
        database, horizon = self.pusher.path.database, self.platform.horizon
        client = self.sightings.watching(self.platform.client(ClientPolicy(pool_size=1)))
        if self.settings.repair_interval > 0:
            repairer = Repairer(database, client, horizon=horizon)
            duties.append(Periodic(
                "repair", self.settings.repair_interval, lambda stop: repairer.run(stop=stop).summary(),
                expected=(RepairError,),
            ))
        if self.settings.purge_interval > 0:
            purging = purger(database, horizon)
            duties.append(
                Periodic("purge", self.settings.purge_interval, lambda stop: purging.run(stop=stop).summary())
            )
        if duties:
            runs = RepairRuns(database, client, horizon)
            duties.append(Periodic(
                "asked-for repair", REQUESTED_RUNS_INTERVAL,
                lambda stop: runs.run_requested(self.leadership, stop),  # each run records its own pass
            ))
        return duties

    def _serve_metrics(self) -> None:
        """Serve this process's metrics and whether it leads, if a port is given (and say where).

        :raise OSError: the port could not be bound.
        """
        port = self.settings.metrics_port
        if port is None:
            return
        # Imported only now: prometheus-client must come after the directory is dropped above.
        from platform_svc.operations.metrics import LeaderCollector
        from shared.clock import ClockCollector
        from shared.metrics import serve_process_metrics

        collectors = [LeaderCollector(self.leadership), ClockCollector(self.pusher.path.clock, measure=True)]
        self._stop_metrics = serve_process_metrics(port, self.metrics_host, collectors=collectors)
        self.echo(f"reconciler metrics on http://{self.metrics_host}:{port}/metrics")


def _started(target: Callable[..., Any], *args: Any, name: str) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def _pushed_line(states: Counter[str]) -> str:
    """``pushed 3 rows: 2 synced, 1 pending``, or ``pushed 0 rows`` (no dangling colon) when nothing went down."""
    pushed = sum(states.values())
    if not pushed:
        return "pushed 0 rows"
    return f"pushed {_rows(pushed)}: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))


def _rows(count: int) -> str:
    """``1 row``, ``2 rows``: what a person reads first is the number, and it should read right."""
    return f"{count} row" if count == 1 else f"{count} rows"
