"""The per-layer cost of a create, at one connection: ``python -m bench.layers``.

Each layer of a request is measured with and without itself, on the real
service: cluster_svc (and platform_svc, whose public creates push to it)
served by ``shared.cli.run_gunicorn`` with the services' own app factory, one
worker, driven by ``wrk -t1 -c1`` with ``bench/post.lua``; the cost of a
request is the CPU the worker process used (utime + stime from
``/proc/PID/stat``) over a run of ``--duration`` seconds, divided by the requests
it answered in that run (wrk's own count). A *variant* is the
same server with one layer stubbed out or replaced, in the worker, after the
app is built: the patches live here, in the benchmark, and nothing in the
product reads them. Variants alternate round by round (A B C, B C A, ...) and
the table gives medians, and the difference from the unpatched server, which
is what that layer costs per request. A stub answers the same status as the
layer it replaces, but not always the same body (the dump stub, say): it is
a measurement, never a way to serve.

    python -m bench.layers [--service cluster|platform|both] [--rounds 5] [--duration 3] [--only a,b]

Worker settings, every variant: gunicorn with the services' gevent worker
(``shared.gunicorn_worker``; the ``gthread`` variant swaps it), ``--workers 1``,
2 pooled DB connections, LOG_FORMAT text (as ``make bench``; the ``json_log``
variant writes the JSON lines instead).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

TOKEN = "bench-internal-token"
WORKERS = 1
POOL_SIZE = 2

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
    from shared.idempotent import CreateResult, Outcome

    now = datetime.now(timezone.utc)

    def create_many(resource, items):
        return [CreateResult(Outcome.CREATED, {**item, "generation": 1, "created_at": now, "updated_at": now,
                                                "deleted_at": None}) for item in items]

    cluster_svc.views._create_many = create_many


def _dbapi(app: Any) -> None:
    """The create's statement on the pooled psycopg2 connection directly (cursor, execute,
    commit): what SQLAlchemy's connection, transaction and execution cost beyond psycopg2.
    New IDs only (the load's creates), a batch of one at a time."""
    import cluster_svc.views
    from shared.idempotent import CreateResult, Outcome, _insert_statement

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
            results.append(CreateResult(Outcome.CREATED, row))
        return results

    cluster_svc.views._create_many = create_many


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
    import shared.logs
    from shared import request_id

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
    import platform_svc.views

    platform_svc.views.idempotency_key = lambda: None


def _push_off(app: Any) -> None:
    """platform_svc: no inline push (no call to cluster_svc, no recording): answered as committed."""
    from platform_svc.sync import Pusher

    Pusher.push_now = lambda self, resource, row: row


VARIANTS: dict[str, tuple[str, Callable[[Any], None] | None]] = {
    "full": ("as served", None),
    "parse_direct": ("webargs/flask-smorest parsing -> a direct schema.load", _parse_direct),
    "parse_none": ("no parsing or validation (body as read, IDs made UUIDs)", _parse_none),
    "dump_none": ("no marshmallow dump (the row as a dict)", _dump_none),
    "db_stub": ("no database (flush answers a made-up row)", _db_stub),
    "dbapi": ("the statement on psycopg2 directly, not through SQLAlchemy", _dbapi),
    "coalescer_off": ("no coalescer (a create flushed directly)", _coalescer_off),
    "metrics_off": ("no metrics (HTTP and outcome counters)", _metrics_off),
    "log_off": ("no access log line", _log_off),
    "json_log": ("access log as JSON (LOG_FORMAT=json)", None),
    "rid_off": ("no request IDs", _rid_off),
    "checks_off": ("no bearer-token and JSON-body checks", _checks_off),
    "errors_off": ("no error handlers registered", _errors_off),
    "gthread": ("gunicorn gthread, 1 thread (no gevent, no psycogreen)", None),
    "auth_stub": ("platform: no API-key authentication (report only)", _auth_stub),
    "idem_off": ("platform: no Idempotency-Key check", _idempotency_key_off),
    "push_off": ("platform: no inline push (HTTP call + recording)", _push_off),
}
CLUSTER_VARIANTS = ["full", "parse_direct", "parse_none", "dump_none", "db_stub", "dbapi", "coalescer_off",
                    "metrics_off", "log_off", "json_log", "rid_off", "checks_off", "errors_off", "gthread"]
# (No dump_none for platform_svc: its answer's dump is the same layer as cluster_svc's, and
# stubbing it there also changed what its pushes carried.)
PLATFORM_VARIANTS = ["full", "auth_stub", "idem_off", "parse_direct", "coalescer_off", "metrics_off",
                     "log_off", "rid_off", "push_off", "gthread"]


# Serving one variant (the child process) ----------------------------------------------


def serve(service: str, variant: str, port: int) -> None:
    """Serve ``service`` as its ``serve`` command does, with ``variant``'s patch applied in the worker."""
    from shared import cli

    if variant == "gthread":
        load_config = cli._Gunicorn.load_config

        def gthread(self) -> None:
            load_config(self)
            self.cfg.set("worker_class", "gthread")
            self.cfg.set("threads", 1)

        cli._Gunicorn.load_config = gthread
    patch = VARIANTS[variant][1]

    if service == "cluster":
        from cluster_svc import Settings, create_app
    else:
        from platform_svc import Settings, create_app
    settings = Settings.from_env()
    settings = dataclasses.replace(settings, pool_size=POOL_SIZE)

    def load() -> Any:
        app = create_app(settings)
        if os.environ.get("BENCH_PRINCIPAL"):
            app.extensions["bench_principal"] = uuid.UUID(os.environ["BENCH_PRINCIPAL"])
        if patch is not None:
            patch(app)
        return app

    cli.run_gunicorn(load, name=f"{service}-{variant}", host="127.0.0.1", port=port, workers=WORKERS,
                     log_format="json" if variant == "json_log" else "text")


# The measurement (the parent) ---------------------------------------------------------


def measure(args: argparse.Namespace) -> str:
    from bench.run import Contender, Server, Wrk, run_checked
    from tooling.testing import console_script, fresh_database, postgres_server

    logs = Path(tempfile.mkdtemp(prefix="bench-layers-"))
    base_env = {"INTERNAL_TOKEN": TOKEN, "LOG_FORMAT": "text",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent),
                                                            os.environ.get("PYTHONPATH")]))}
    services = ["cluster", "platform"] if args.service == "both" else [args.service]
    only = set(args.only.split(",")) if args.only else None
    lines: list[str] = []
    with ExitStack() as stack:
        server_url = stack.enter_context(postgres_server())

        def database(prefix: str, tool: str, variable: str) -> str:
            url = fresh_database(server_url, f"layers_{prefix}")
            run_checked([console_script(tool), "migrate"], {**os.environ, **base_env, variable: url}, "migrate")
            return url

        def start(name: str, argv: list[str], env: dict[str, str]) -> Server:
            server = Server(name, argv, {**base_env, **env}, logs)
            stack.callback(server.stop)
            return server.start()

        def variant_server(service: str, variant: str, env: dict[str, str]) -> Server:
            return start(f"{service}-{variant}", [sys.executable, "-m", "bench.layers", "serve", service, variant], env)

        wrk = Wrk(1, 1)
        for service in services:
            names = [v for v in (CLUSTER_VARIANTS if service == "cluster" else PLATFORM_VARIANTS)
                     if only is None or v in only or v == "full"]
            contenders: list[tuple[str, Contender]] = []
            if service == "cluster":
                env = {"CLUSTER_DATABASE_URL": database("cluster", "cluster-svc", "CLUSTER_DATABASE_URL")}
                for name in names:
                    server = variant_server("cluster", name, env)
                    contenders.append((name, Contender(name, name, server.url + "/v1/clusters", "create", TOKEN, 201,
                                                       cpu_roots={"worker": server.worker_pids()[0]})))
            else:
                cluster_env = {"CLUSTER_DATABASE_URL": database("pcluster", "cluster-svc", "CLUSTER_DATABASE_URL")}
                cluster = start("cluster-for-platform", [console_script("cluster-svc"), "serve", "--workers",
                                                         str(WORKERS), "--pool-size", str(POOL_SIZE)], cluster_env)
                env = {"PLATFORM_DATABASE_URL": database("platform", "platform-svc", "PLATFORM_DATABASE_URL"),
                       "CLUSTER_SVC_URL": cluster.url}
                import json

                account = json.loads(run_checked([console_script("platform-svc"), "create-account", "bench", "--json"],
                                                 {**os.environ, **base_env, **env}, "create-account"))
                env["BENCH_PRINCIPAL"] = str(account["account_id"])
                for name in names:
                    server = variant_server("platform", name, env)
                    contenders.append((name, Contender(
                        name, name, server.url + "/v1/clusters", "public", account["api_key"], 201,
                        cpu_roots={"worker": server.worker_pids()[0], "cluster_svc": cluster.worker_pids()[0]},
                        synced_only=name != "push_off")))
            for _, contender in contenders:
                wrk.run(contender.probe(), args.warmup)
            for r in range(args.rounds):
                shift = r % len(contenders)
                for name, contender in contenders[shift:] + contenders[:shift]:
                    result = wrk.run(contender, args.duration)
                    contender.cpu.append(result["cpu_ms"])
                    contender.latency.append((result["p50_us"] / 1000, result["p99_us"] / 1000))
                    contender.samples.append(result["rate"])
                print(f"layers: {service} round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
            lines += table(service, contenders)
            if args.profile:
                lines += profile_full(service, dict(contenders)["full"], wrk, logs)
            for _, contender in contenders:
                for problem in contender.problems:
                    lines.append(f"  WARNING {contender.label}: {problem[:300]}")
    return "\n".join(lines)


def profile_full(service: str, full: Any, wrk: Any, logs: Path) -> list[str]:
    """py-spy (GIL holder) on the unpatched worker while wrk drives it: which layer its CPU goes to."""
    import subprocess

    from bench.profile import summarize
    from bench.run import py_spy

    out = logs / f"{service}.full.gil.txt"
    spy = subprocess.Popen([py_spy(), "record", "--pid", str(full.cpu_roots["worker"]), "-f", "raw", "-r", "500",
                            "-d", "11", "-o", str(out), "--nonblocking", "--gil"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let py-spy attach
    wrk.run(full.probe(), 10)
    spy.wait(timeout=60)
    cpu = full.cpu_median("worker") * 1000
    return ["", f"{service}, unpatched: py-spy profile (GIL holder), shares of its {cpu:.0f} µs per request ({out})",
            summarize(out.read_text())]


def table(service: str, contenders: list[tuple[str, Any]]) -> list[str]:
    full = dict(contenders)["full"]
    base = full.cpu_median("worker") * 1000
    lines = ["", f"{service}: CPU µs per request of the worker process (wrk -t1 -c1; medians of rounds)",
             f"  {'variant':<14}{'what it changes':<58}{'µs/req':>8}{'Δ µs':>8}  {'p50 ms':>7}"
             + ("  cluster_svc µs" if service == "platform" else "")]
    for name, contender in contenders:
        cpu = contender.cpu_median("worker") * 1000
        delta = "" if name == "full" else f"{cpu - base:+8.0f}"
        extra = f"  {contender.cpu_median('cluster_svc') * 1000:14.0f}" if service == "platform" else ""
        lines.append(f"  {name:<14}{VARIANTS[name][0]:<58}{cpu:8.0f}{delta:>8}  {contender.latency_median(0):7.2f}"
                     + extra)
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":
        port = int(argv[argv.index("--port") + 1])
        serve(argv[1], argv[2], port)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service", choices=["cluster", "platform", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=3, help="seconds per variant per round")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--only", help="comma-separated variants (full is always run)")
    parser.add_argument("--profile", action="store_true", help="also py-spy the unpatched worker (needs py-spy)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    text = measure(args)
    print(f"\nbench.layers, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {args.rounds} rounds x {args.duration} s"
          f" per variant, alternated; gunicorn --workers {WORKERS}, {POOL_SIZE} pooled DB connections;"
          f" elapsed {(time.monotonic() - started) / 60:.1f} min")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
