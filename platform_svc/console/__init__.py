"""The operator's console at ``/console``: what is stuck, why, and the button that fixes it.

Pages served by platform_svc itself (:mod:`platform_svc.console.views`), read
through the services the CLI uses (``sync-status``, ``--retry-failed``,
``repair``); its own credential and sessions (:mod:`platform_svc.console.auth`);
repair runs watched from the page (:mod:`platform_svc.operations.runs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from flask import Flask
from idempotent_pair_client.transport import ClientPolicy

from platform_svc.console import auth
from platform_svc.operations.runs import RepairRuns
from platform_svc.push.breaker import CircuitBreaker
from shared.client import InternalClient
from shared.db import Database
from shared.horizon import Horizon

BLUEPRINT = "console"
ICON_BLUEPRINT = "console_icon"  # /favicon.ico, which a browser asks for on every page

# The console's calls to cluster_svc (an object's copy, a retry's re-check): a person is waiting, so
# a page answers within 2 s whatever cluster_svc does, and says so when it did not answer.
CONSOLE_POLICY = ClientPolicy(connect_timeout=0.5, read_timeout=1.5, retries=0, total_timeout=2.0, pool_size=4)


@dataclass(frozen=True)
class Console:
    """What the pages read through: the database, a client of cluster_svc, this process's breaker."""

    database: Database
    client: InternalClient
    breaker: CircuitBreaker  # this process's own: each worker has one
    horizon: Horizon
    stalled_after: timedelta
    runs: RepairRuns


def register_console(
    app: Flask, *, database: Database, client: InternalClient, breaker: CircuitBreaker, horizon: Horizon
) -> None:
    """Serve the console on ``app``: its blueprint, its sessions and its security headers."""
    from platform_svc.console.views import blueprint, icon
    from platform_svc.states import stalled_after

    auth.configure_sessions(app, database)
    app.register_blueprint(blueprint)
    app.register_blueprint(icon)
    app.extensions["console"] = Console(
        database, client, breaker, horizon, stalled_after(), RepairRuns(database, client, horizon)
    )
