"""The app-factory step that makes a service observable, wired once for both.

``register_observability`` gives an app:

- a request ID per request (the caller's ``X-Request-ID`` if valid, else a
  new one), bound for the logs and the HTTP client, and sent back;
- ``http_requests_total`` and ``http_request_duration_seconds`` by route
  template (never the raw path, so IDs in URLs cannot explode the series);
- one access line per request at INFO (method, route, status, duration; no
  body, no header other than the request ID);
- ``GET /healthz`` (alive), ``GET /readyz`` (the database answers) and
  ``GET /metrics`` (internal token required, whatever the service's own
  authentication is), whose ``ready`` gauge says what ``/readyz`` would
  (``/metrics`` itself answers with the database down, so an alert needs it);
- with a :class:`~shared.clock.ClockWatch`, readiness's query is the clock's
  measurement (``SELECT clock_timestamp()``, in place of ``SELECT 1``), so every
  readiness check and every scrape measures the offset anew, and
  ``clock_offset_seconds`` is served beside ``ready``.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import flask_smorest
from flask import Flask, Response, g, request
from idempotent_pair_client import request_id
from marshmallow import Schema, fields
from sqlalchemy import text

from shared import config
from shared.clock import ClockCollector, ClockWatch
from shared.db import Database
from shared.errors import PROBLEM_JSON, Unauthorized, database_unavailable_problem
from shared.repeated_headers import came_repeated
from shared.schemas import ProblemSchema

access_log = logging.getLogger("access")
log = logging.getLogger(__name__)

# Endpoints that skip the service's own authentication: the health checks are
# public, and /metrics checks the internal token itself.
PUBLIC_ENDPOINTS = frozenset({"operations.healthz", "operations.readyz"})
SELF_AUTHENTICATED_ENDPOINTS = frozenset({"operations.metrics"})

READY_TIMEOUT = 2.0  # seconds the database has to answer SELECT 1
UNMATCHED = "unmatched"  # the route label of a request no URL rule matched
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Health(Schema):
    status = fields.String(required=True, metadata={"example": "ok"})


def register_observability(
    app: Flask,
    api: flask_smorest.Api,
    *,
    service: str,
    internal_token: str,
    database: Database,
    collectors: Iterable[object] = (),
    clock: ClockWatch | None = None,
) -> None:
    """Request IDs, HTTP metrics, the access log and the operations routes.

    Call it before any other ``before_request`` hook is registered, so a
    request refused by those (401, 415, ...) is timed, counted and logged too.
    ``collectors`` are added to what ``/metrics`` serves (read at scrape time).
    """
    from shared import metrics  # here, not at import: see shared.metrics

    metrics.check_storage()
    readiness = _Readiness(database, clock)
    # Readiness first: a scrape then says whether the database answers before
    # the database's own gauges try it (and its check measured the clock just before its gauge).
    clocks = (ClockCollector(clock),) if clock is not None else ()
    collectors = (metrics.ReadyCollector(readiness.check), *clocks, *collectors)
    registry = metrics.scrape_registry(collectors)
    recorder = _Recorder(metrics)

    @app.before_request
    def start_request() -> None:
        g.request_started = time.perf_counter()
        # Sent on two lines, the server joined them ("one,two"): not one ID, so replaced like any invalid one.
        sent = None if came_repeated(request.environ, request_id.HEADER) else request.headers.get(request_id.HEADER)
        g.request_id_token = request_id.bind(request_id.accept_or_new(sent))

    @app.after_request
    def finish_request(response: Response) -> Response:
        started = g.get("request_started")
        if started is None:  # a before_request hook registered ahead of ours failed
            return response
        rid = request_id.current_request_id()
        if rid is not None:
            response.headers[request_id.HEADER] = rid
        current = request._get_current_object()  # one proxy lookup, not one per attribute
        rule = current.url_rule
        route = rule.rule if rule is not None else UNMATCHED
        method = current.method if rule is not None or current.method in _METHODS else "OTHER"
        recorder.record(method, route, response.status_code, time.perf_counter() - started)
        return response

    @app.teardown_request
    def end_request(_exc: BaseException | None) -> None:
        token = g.pop("request_id_token", None)
        if token is not None:
            request_id.unbind(token)

    api.register_blueprint(
        _operations_blueprint(registry, metrics.exposition, config.internal_tokens(internal_token), readiness)
    )
    app.extensions["observability"] = {"service": service, "registry": registry, "collectors": collectors}


class _Recorder:
    """Counts, times and logs one answered request.

    Label children are looked up once per (method, route, status) and kept:
    ``labels()`` takes a lock and builds a key on every call, and this runs on
    every request.
    """

    def __init__(self, metrics: Any) -> None:
        self._requests = metrics.HTTP_REQUESTS
        self._duration = metrics.HTTP_DURATION
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self._requests.labels(method, route, str(status)),
                self._duration.labels(method, route),
            )
        children[0].inc()
        children[1].observe(seconds)
        duration_ms = round(seconds * 1000, 2)
        access_log.info(
            "%s %s %s %.2fms",
            method,
            route,
            status,
            duration_ms,
            extra={"method": method, "route": route, "status": status, "duration_ms": duration_ms},
        )


def _operations_blueprint(
    registry: Any, exposition: Callable[[Any], tuple[bytes, str]], tokens: tuple[str, ...], readiness: _Readiness
) -> flask_smorest.Blueprint:
    blp = flask_smorest.Blueprint("operations", __name__, description="Health, readiness and metrics")

    @blp.route("/healthz")
    @blp.doc(security=[])
    @blp.response(200, Health, description="The process runs")
    def healthz():
        """Liveness: 200 while the process runs."""
        return {"status": "ok"}

    @blp.route("/readyz")
    @blp.doc(security=[])
    @blp.response(200, Health, description="The database answers")
    @blp.alt_response(
        503,
        schema=ProblemSchema,
        content_type=PROBLEM_JSON,
        description="The database does not answer (unavailable)",
    )
    def readyz():
        """Readiness: 200 when the database answers `SELECT 1` within a couple of seconds."""
        if readiness.check():
            return {"status": "ok"}
        return database_unavailable_problem()

    @blp.route("/metrics")
    @blp.doc(
        summary="Prometheus metrics (internal token required, not an account key)",
        responses={
            "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}
        },
    )
    @blp.alt_response(
        401, schema=ProblemSchema, content_type=PROBLEM_JSON, description="The internal token is missing or wrong"
    )
    def metrics():
        """Prometheus metrics, in its text format."""
        scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not config.token_accepted(sent.strip(), tokens):
            raise Unauthorized("GET /metrics needs 'Authorization: Bearer <internal token>'.")
        body, content_type = exposition(registry)
        return Response(body, content_type=content_type)

    return blp


class _Readiness:
    """``SELECT 1`` on the app's own pool, given at most READY_TIMEOUT.

    The query runs on a helper thread so a database that hangs (stopped, or
    behind a dead network) cannot hold the request past the timeout; checks
    made while one hangs queue behind it and time out as well, which is the
    truth: the service is not ready.
    """

    def __init__(self, database: Database, clock: ClockWatch | None = None) -> None:
        self._database = database
        self._clock = clock
        self._executor: ThreadPoolExecutor | None = None

    def check(self) -> bool:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="readyz")
        future = self._executor.submit(self._select_one)
        try:
            return future.result(timeout=READY_TIMEOUT)
        except FutureTimeout:
            log.warning("readiness: the database did not answer within %.0f s", READY_TIMEOUT)
            return False

    def _select_one(self) -> bool:
        try:
            with self._database.engine.connect() as connection:
                if self._clock is not None:
                    self._clock.measure_on(connection)
                else:
                    connection.execute(text("SELECT 1"))
            return True
        except Exception as exc:  # any failure to answer means not ready
            log.warning("readiness: the database is unreachable (%s)", type(exc).__name__)
            return False
