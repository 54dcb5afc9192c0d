"""platform_svc: the public service that assigns every ID and pushes objects down.

Its roles are subpackages (docs/design.md, "Where things are"): the public API
(:mod:`platform_svc.api`), the push path (:mod:`platform_svc.push`), the reconciler
process (:mod:`platform_svc.reconciler`), the operations (:mod:`platform_svc.operations`)
and the operator's console (:mod:`platform_svc.console`), over the tables
(:mod:`platform_svc.models`), the public bodies (:mod:`platform_svc.schemas`), the sync
states (:mod:`platform_svc.states`) and the settings (:mod:`platform_svc.settings`).
:func:`create_app` assembles the web process; ``platform-svc reconcile`` the reconciler
(:mod:`platform_svc.reconciler.manager`).

Importing the package loads nothing of the web or database stack (Flask,
SQLAlchemy, ...): :func:`create_app` and the methods of :class:`Settings` import
it when called, so ``idempotent_pair_client.platform`` stays light for a caller's process.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from platform_svc.settings import (
    DEFAULT_RATE_LIMIT,
    INLINE_POLICY,
    MAX_RATE_LIMIT,
    Settings,
    default_rate_limit,
    inline_lease,
)

if TYPE_CHECKING:
    from flask import Flask

__all__ = [
    "DEFAULT_RATE_LIMIT", "INLINE_POLICY", "MAX_RATE_LIMIT", "Settings", "create_app", "default_rate_limit",
    "inline_lease",
]


def create_app(settings: Settings | None = None, *, testing: bool = False) -> Flask:
    """The application factory; settings come from the environment when not given."""
    from platform_svc import console
    from platform_svc.api import admission, auth
    from platform_svc.api.views import blueprint
    from platform_svc.api.writes import Writes
    from platform_svc.operations.metrics import SyncRowsCollector
    from platform_svc.operations.sightings import Sightings
    from platform_svc.push.breaker import CircuitBreaker
    from platform_svc.push.inline import InlinePusher
    from platform_svc.push.pusher import PushPath
    from shared.api import create_service_app
    from shared.clock import ClockWatch
    from sqlalchemy.exc import IntegrityError

    settings = settings or Settings.from_env()
    database = settings.database()
    # IDs are minted on this host's clock: measured against the database's at start-up,
    # at each readiness check and whenever it steps, and each ID checked as it is stored.
    clock = ClockWatch.from_env(database, settings.horizon)
    clock.measure()
    authenticator = admission.Authenticator(database, settings.rate_limit)
    refusals = auth.SlowRefusals()  # this worker's count, per source, of keys that admit nothing

    app, api = create_service_app(
        __name__,
        title="platform_svc",
        database=database,
        authenticate=functools.partial(auth.admit, authenticator, refusals),
        internal_token=settings.internal_token,
        metrics_collectors=[SyncRowsCollector(database)],
        browser_blueprints=[console.BLUEPRINT, console.ICON_BLUEPRINT],
        clock=clock,
        rate_limited="/v1/",
        testing=testing,
    )
    # One breaker per process: after a few inline pushes cluster_svc could not
    # serve, public writes stop waiting on it (answered pending) until a probe passes.
    breaker = CircuitBreaker(cool_down=settings.breaker_cool_down, probe_timeout=INLINE_POLICY.longest_call() + 1)
    sightings = Sightings(database, "web")  # what this worker's calls saw of cluster_svc, for the console
    pusher = InlinePusher(PushPath(
        database, sightings.watching(settings.client(INLINE_POLICY)), horizon=settings.horizon, clock=clock,
    ), breaker)
    app.extensions["writes"] = Writes(database, pusher, settings.horizon, clock, settings.inline_lease)
    app.extensions["authenticator"] = authenticator
    app.extensions["refusals"] = refusals
    app.after_request(auth.rate_limit_headers)
    app.register_error_handler(IntegrityError, auth.refused_write)
    api.register_blueprint(blueprint())
    console.register_console(
        app, database=database, client=sightings.watching(settings.client(console.CONSOLE_POLICY)), breaker=breaker,
        horizon=settings.horizon,
    )
    return app
