"""cluster_svc: the internal service that creates-or-returns by the caller's ID.

Importing the package loads nothing of the web or database stack (Flask,
SQLAlchemy, ...): :func:`create_app` and :attr:`Settings.horizon` import it when
called, so ``idempotent_pair_client.cluster`` stays light for a caller's process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared import config

if TYPE_CHECKING:
    from flask import Flask

    from shared.horizon import Horizon


@dataclass(frozen=True)
class Settings:
    database_url: str
    internal_token: str  # INTERNAL_TOKEN as set: one token, or several separated by commas (any is accepted)
    pool_size: int = 5
    id_horizon_seconds: int = config.DEFAULT_ID_HORIZON_SECONDS
    database_wait: float = 0.0  # DATABASE_WAIT_SECONDS: see shared.db.Database

    @classmethod
    def from_env(cls) -> Settings:
        """:raise ConfigError: a required setting is missing (or one is malformed)."""
        return cls(
            database_url=config.database_url("CLUSTER_DATABASE_URL"),
            internal_token=config.checked_internal_token(why="the bearer token callers of cluster_svc present"),
            pool_size=config.integer("CLUSTER_DB_POOL_SIZE", 5),
            id_horizon_seconds=config.id_horizon_seconds(),
            database_wait=config.seconds("DATABASE_WAIT_SECONDS", 0.0),
        )

    @property
    def horizon(self) -> Horizon:
        from shared.horizon import Horizon

        return Horizon(self.id_horizon_seconds)


def create_app(settings: Settings | None = None, *, testing: bool = False) -> Flask:
    """The application factory; settings come from the environment when not given."""
    from cluster_svc.tombstones import TombstonesCollector
    from cluster_svc.views import blueprint
    from shared.api import create_service_app
    from shared.clock import ClockWatch
    from shared.db import Database

    settings = settings or Settings.from_env()
    database = Database(settings.database_url, pool_size=settings.pool_size, connect_wait=settings.database_wait)
    # Every ID is judged here on this host's clock: measured against the database's at
    # start-up, and again at each readiness check and whenever the clock steps.
    clock = ClockWatch.from_env(database, settings.horizon)
    clock.measure()
    accepted = config.internal_tokens(settings.internal_token)

    def authenticate(token: str) -> Any | None:
        return "internal" if config.token_accepted(token, accepted) else None

    app, api = create_service_app(
        __name__,
        title="cluster_svc",
        database=database,
        authenticate=authenticate,
        internal_token=settings.internal_token,
        metrics_collectors=[TombstonesCollector(database, settings.horizon)],
        clock=clock,
        testing=testing,
    )
    app.extensions["horizon"] = settings.horizon
    app.extensions["clock"] = clock
    api.register_blueprint(blueprint())
    return app
