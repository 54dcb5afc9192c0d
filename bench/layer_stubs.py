"""The variants of ``python -m bench.layers``: each stubs out or replaces one layer of a
request, in the worker, after the app is built (see bench/layers.py).

A stub answers the same status as the layer it replaces, but not always the
same body: it is a measurement, never a way to serve, and nothing in the
product imports this module.
"""
from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

# Patches: each takes the app just built (in the worker) -------------------------------


def _parse_direct(app: Any) -> None:
    """webargs' machinery out: the body read by Flask and loaded by the route's schema, nothing else."""
    from flask import request

    from shared.api import _JsonParser

    def parse(self, argmap, req=None, *, location=None, **_: Any) -> Any:
        data = request.get_json() if location in (None, "json") else request.args.to_dict()
        return argmap.load(data)

    _JsonParser.parse = parse


def _parse_none(app: Any) -> None:
    """No parsing layer at all: the JSON body as Flask reads it, IDs made UUIDs by hand (no validation)."""
    from flask import request

    from shared.api import _JsonParser

    def parse(self, argmap, req=None, *, location=None, **_: Any) -> Any:
        if location not in (None, "json"):
            return argmap.load(request.args.to_dict())
        data = request.get_json()
        return {name: uuid.UUID(value) if name == "id" or name.endswith("_id") else value
                for name, value in data.items()}

    _JsonParser.parse = parse


def _dump_none(app: Any) -> None:
    """No marshmallow dump of the answer: the row handed to Flask's JSON as a dict (the routes'
    output schemas only: platform_svc's pushes build their bodies with other schemas)."""
    service = app.import_name.split(".")[0]
    schemas = __import__(f"{service}.schemas", fromlist=["route_schemas"])
    models = __import__(f"{service}.models", fromlist=["RESOURCES"])

    def dump(self, obj, *, many=None):
        return [dict(o) for o in obj] if many or self.many else dict(obj)

    for resource in models.RESOURCES:
        schemas.route_schemas(resource)["out"].dump = dump


def _db_stub(app: Any) -> None:
    """No database: the create's flush answers a made-up row (no checkout, BEGIN, INSERT, COMMIT)."""
    import cluster_svc.views
    from shared.idempotent import CreateOutcome, CreateResult

    now = datetime.now(timezone.utc)

    def create_many(resource, items):
        return [CreateResult(CreateOutcome.CREATED, {**item, "generation": 1, "created_at": now, "updated_at": now,
                                                "deleted_at": None}) for item in items]

    cluster_svc.views._create_many = create_many


def _dbapi(app: Any) -> None:
    """The create's statement on the pooled psycopg2 connection directly (cursor, execute,
    commit): what SQLAlchemy's connection, transaction and execution cost beyond psycopg2.
    New IDs only (the load's creates), a batch of one at a time."""
    import cluster_svc.views
    from shared.idempotent import CreateOutcome, CreateResult, _insert_statement

    engine = app.extensions["database"].engine
    compiled: dict[Any, str] = {}

    def create_many(resource, items):
        results = []
        for item in items:
            shape = tuple((name, None) for name in item)
            if shape not in compiled:
                compiled[shape] = str(_insert_statement(resource, shape, ("id",)).compile(dialect=engine.dialect))
            connection = engine.raw_connection()
            try:
                cursor = connection.cursor()
                cursor.execute(compiled[shape], item)
                row = dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
                connection.commit()
            finally:
                connection.close()
            results.append(CreateResult(CreateOutcome.CREATED, row))
        return results

    cluster_svc.views._create_many = create_many


def _sqlalchemy_execute(app: Any) -> None:
    """The hot statements (a create's INSERT and replay read, a push's recording) through SQLAlchemy's
    execution again, as before decision 0024, instead of on the transaction's psycopg2 cursor."""
    import shared.prebuilt

    shared.prebuilt._compiled = lambda statement, dialect: None


def _coalescer_off(app: Any) -> None:
    """Every create flushed on its own, directly: no Coalescer (waiter, lock, event)."""
    from shared.coalesce import Coalescer

    def submit(self, item, size=0):
        (result,) = self._flush([item])
        if isinstance(result, BaseException):
            raise result
        return result

    Coalescer.submit = submit


def _metrics_off(app: Any) -> None:
    """No metrics: neither the HTTP counter and histogram nor the outcome counters move."""
    import shared.counters
    import shared.observability

    record = shared.observability._Recorder.record

    class Still:
        def inc(self, *args: Any) -> None:
            pass

        observe = inc

    def quiet(self, method, route, status, seconds):
        self._children[method, route, status] = (Still(), Still())
        record(self, method, route, status, seconds)

    shared.observability._Recorder.record = quiet
    for name in dir(shared.counters):
        if name.startswith("count_"):
            for module in list(sys.modules.values()):
                if getattr(module, name, None) is getattr(shared.counters, name):
                    setattr(module, name, lambda *args, **kwargs: None)


def _log_off(app: Any) -> None:
    """No access line (the logger disabled: one attribute test per request)."""
    logging.getLogger("access").disabled = True


def _rid_off(app: Any) -> None:
    """No request IDs: none read, made, bound, sent back or stamped on log lines."""
    from idempotent_pair_client import request_id

    import shared.logs

    request_id.accept_or_new = lambda sent: None
    request_id.bind = lambda value: None
    request_id.unbind = lambda token: None
    request_id.current_request_id = lambda: None
    shared.logs.current_request_id = lambda: None


def _checks_off(app: Any) -> None:
    """No bearer-token and JSON-body checks (the before_request hooks after observability's)."""
    app.before_request_funcs[None] = [f for f in app.before_request_funcs[None]
                                      if f.__name__ not in ("require_bearer_token", "require_json_body")]
    from flask import g

    principal = app.extensions.get("bench_principal", "internal")

    def principal_only() -> None:
        g.principal = principal

    app.before_request_funcs[None].append(principal_only)


def _errors_off(app: Any) -> None:
    """No error handlers registered (they only run on an error: this shows their cost on success)."""
    app.error_handler_spec.clear()
    app._find_error_handler = lambda e, blueprints: None


def _auth_stub(app: Any) -> None:
    """platform_svc: the API key not checked (no cache lookup, no hash): reported only."""
    import shared.api

    account = app.extensions["bench_principal"]
    hooks = app.before_request_funcs[None]
    for index, hook in enumerate(hooks):
        if hook.__name__ == "require_bearer_token":
            def require_bearer_token() -> None:
                from flask import g
                g.principal = account
            hooks[index] = require_bearer_token
    del shared.api


def _idempotency_key_off(app: Any) -> None:
    """platform_svc: no Idempotency-Key check (the header is absent in this load)."""
    import platform_svc.api.views

    platform_svc.api.views.idempotency_key = lambda: None


def _push_off(app: Any) -> None:
    """platform_svc: no inline push (no call to cluster_svc, no recording): answered as committed."""
    from platform_svc.push.inline import InlinePusher

    InlinePusher.push_now = lambda self, resource, row: row


def _http_off(app: Any) -> None:
    """platform: the inline push's HTTP call answered in the worker, as cluster_svc answers a create
    (no urllib3, no JSON written or read, no socket), the recording of the answer kept: what the
    HTTP core's client side costs a push."""
    from datetime import datetime, timezone

    from shared.client import Answer, InternalClient, Operation, Outcome

    def call(self, operation, method, path, body, *, deadline=None):
        now = datetime.now(timezone.utc).isoformat()
        made = {**body, "generation": body.get("generation", 1), "created_at": now, "updated_at": now,
                "deleted_at": None}
        return Answer(Outcome.DONE, 201, made, f"{method} {path}: 201", operation, body)

    assert Operation.CREATE  # the creates are what the load makes
    InternalClient.call = call


def _orjson_provider(app: Any) -> Any:
    """Flask's JSON provider with its answers written by orjson (keys sorted, times passed to Flask's
    own ``default``, as Flask's provider writes them)."""
    import orjson
    from flask.json.provider import DefaultJSONProvider

    class OrjsonProvider(DefaultJSONProvider):
        def dumps(self, obj: Any, **kwargs: Any) -> str:
            return orjson.dumps(obj, default=self.default,
                                option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME).decode()

    return OrjsonProvider(app)


def _orjson(app: Any) -> None:
    """orjson (a contender, issue 45) for Flask's JSON (requests read, answers written) and for the
    HTTP core's bodies (the inline push's requests and their answers)."""
    import orjson
    from idempotent_pair_client import transport

    app.json = _orjson_provider(app)
    app.json.loads = lambda s, **kwargs: orjson.loads(s)
    transport.encode = lambda body: orjson.dumps(body)
    transport.decode = lambda data: orjson.loads(data) if data else None


def _orjson_dumps(app: Any) -> None:
    """orjson for Flask's answers only: requests still read by the standard library's json, whose
    errors and number limits the contract's answers keep (a huge integer is a 422, never a 400)."""
    app.json = _orjson_provider(app)


VARIANTS: dict[str, tuple[str, Callable[[Any], None] | None]] = {
    "full": ("as served", None),
    "parse_direct": ("webargs/flask-smorest parsing -> a direct schema.load", _parse_direct),
    "parse_none": ("no parsing or validation (body as read, IDs made UUIDs)", _parse_none),
    "dump_none": ("no marshmallow dump (the row as a dict)", _dump_none),
    "db_stub": ("no database (flush answers a made-up row)", _db_stub),
    "dbapi": ("the statement on psycopg2 directly, not through SQLAlchemy", _dbapi),
    "sqlalchemy_execute": ("the hot statements through SQLAlchemy's execution (before 0024)", _sqlalchemy_execute),
    "coalescer_off": ("no coalescer (a create flushed directly)", _coalescer_off),
    "metrics_off": ("no metrics (HTTP and outcome counters)", _metrics_off),
    "log_off": ("no access log line", _log_off),
    "json_log": ("access log as JSON (LOG_FORMAT=json)", None),
    "rid_off": ("no request IDs", _rid_off),
    "checks_off": ("no bearer-token and JSON-body checks", _checks_off),
    "errors_off": ("no error handlers registered", _errors_off),
    "gthread": ("gunicorn gthread, 1 thread (no gevent, no psycogreen)", None),
    "granian": ("granian's WSGI server, 1 worker, 1 blocking thread (no gunicorn, no gevent)", None),
    "orjson": ("orjson for Flask's JSON and the HTTP core's bodies", _orjson),
    "orjson_dumps": ("orjson for Flask's answers only", _orjson_dumps),
    "auth_stub": ("platform: no API-key authentication (report only)", _auth_stub),
    "idem_off": ("platform: no Idempotency-Key check", _idempotency_key_off),
    "push_off": ("platform: no inline push (HTTP call + recording)", _push_off),
    "http_off": ("platform: the push's HTTP call answered in the worker (recording kept)", _http_off),
}
CLUSTER_VARIANTS = ["full", "sqlalchemy_execute", "parse_direct", "parse_none", "dump_none", "db_stub", "dbapi",
                    "coalescer_off", "metrics_off", "log_off", "json_log", "rid_off", "checks_off", "errors_off",
                    "gthread", "granian", "orjson", "orjson_dumps"]
# (No dump_none for platform_svc: its answer's dump is the same layer as cluster_svc's, and
# stubbing it there also changed what its pushes carried.)
PLATFORM_VARIANTS = ["full", "sqlalchemy_execute", "auth_stub", "idem_off", "parse_direct", "coalescer_off",
                     "metrics_off", "log_off", "rid_off", "push_off", "http_off", "gthread", "granian", "orjson",
                     "orjson_dumps"]
