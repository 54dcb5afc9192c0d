"""The per-layer cost of a create, at one connection: ``python -m bench.layers``.

Each layer of a request is measured with and without itself, on the real
service: cluster_svc (and platform_svc, whose public creates push to it)
served by ``shared.cli.run_gunicorn`` with the services' own app factory, one
worker, driven by ``wrk -t1 -c1`` with ``bench/post.lua``; the cost of a
request is the CPU the worker process used (utime + stime from
``/proc/PID/stat``) over a run of ``--duration`` seconds, divided by the requests
it answered in that run (wrk's own count). A *variant* is the
same server with one layer stubbed out or replaced, in the worker, after the
app is built: the patches live in bench/layer_stubs.py, and nothing in the
product reads them. Variants alternate round by round (A B C, B C A, ...) and
the table gives medians, and the difference from the unpatched server, which
is what that layer costs per request. A stub answers the same status as the
layer it replaces, but not always the same body (the dump stub, say): it is
a measurement, never a way to serve.

    python -m bench.layers [--service cluster|platform|both] [--rounds 5] [--duration 3] [--only a,b]
    python -m bench.layers --in-process [--requests 2000] ...   # no server: bench/layers_inprocess.py

Worker settings, every variant: gunicorn with the services' gevent worker
(``shared.gunicorn_worker``; the ``gthread`` variant swaps it), ``--workers 1``,
2 pooled DB connections, LOG_FORMAT text (as ``make bench``; the ``json_log``
variant writes the JSON lines instead).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import layers_inprocess as in_process
from bench.layer_stubs import CLUSTER_VARIANTS, PLATFORM_VARIANTS, VARIANTS

TOKEN = "bench-internal-token"
WORKERS = 1
POOL_SIZE = 2

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
    if variant == "granian":  # the app built in granian's worker, by granian_app
        from granian import Granian
        from granian.constants import Interfaces

        os.environ["BENCH_LAYERS_SERVICE"] = service
        Granian("bench.layers:granian_app", address="127.0.0.1", port=port, interface=Interfaces.WSGI,
                workers=WORKERS, blocking_threads=1, factory=True, log_access=False).serve()
        return
    cli.run_gunicorn(lambda: build(service, variant), name=f"{service}-{variant}", host="127.0.0.1", port=port,
                     workers=WORKERS, log_format="json" if variant == "json_log" else "text")


def build(service: str, variant: str) -> Any:
    """The service's app as its ``serve`` builds it, with ``variant``'s patch applied."""
    if service == "cluster":
        from cluster_svc import Settings, create_app
    else:
        from platform_svc import Settings, create_app
    settings = dataclasses.replace(Settings.from_env(), pool_size=POOL_SIZE)
    app = create_app(settings)
    if os.environ.get("BENCH_PRINCIPAL"):
        app.extensions["bench_principal"] = uuid.UUID(os.environ["BENCH_PRINCIPAL"])
    patch = VARIANTS[variant][1]
    if patch is not None:
        patch(app)
    return app


def granian_app() -> Any:
    """granian's factory (in its worker): the service named by the serving process, unpatched."""
    return build_logged(os.environ["BENCH_LAYERS_SERVICE"], "full")


def build_logged(service: str, variant: str) -> Any:
    """:func:`build`, with the service's logging set up first as its ``serve`` sets it up (the
    app's own access line, written as served), where no gunicorn does it."""
    import logging.config

    from shared.cli import logging_config

    logging.config.dictConfig(logging_config(f"{service}_svc", "text"))
    return build(service, variant)


# The measurement (the parent) ---------------------------------------------------------


def measure(args: argparse.Namespace) -> str:
    from bench.driver import Contender, Wrk
    from bench.processes import Server, run_checked
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
            else:
                env = platform_env(start, database, base_env,
                                   database("pcluster", "cluster-svc", "CLUSTER_DATABASE_URL"))
            if args.in_process:
                with open(logs / f"{service}.in-process.log", "a") as log:
                    done = in_process.measure(service, names, {**base_env, **env}, log, rounds=args.rounds,
                                              requests=args.requests)
                print("\n".join(done), file=sys.stderr, flush=True)  # each service's table as soon as it is done
                lines += done
                continue
            if service == "cluster":
                for name in names:
                    server = variant_server("cluster", name, env)
                    contenders.append((name, Contender(name, name, server.url + "/v1/clusters", "create", TOKEN, 201,
                                                       cpu_roots={"worker": server.worker_pids()[0]})))
            else:
                cluster_pid = int(env["BENCH_CLUSTER_PID"])
                for name in names:
                    server = variant_server("platform", name, env)
                    contenders.append((name, Contender(
                        name, name, server.url + "/v1/clusters", "public", env["BENCH_API_KEY"], 201,
                        cpu_roots={"worker": server.worker_pids()[0], "cluster_svc": cluster_pid},
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


def platform_env(start: Any, database: Any, base_env: dict[str, str], cluster_database: str) -> dict[str, str]:
    """What platform_svc's variants are served with: its database, a cluster_svc served to push
    to (one worker, as the variants), and an account (its key, and the principal for the stubs)."""
    import json

    from bench.processes import run_checked
    from tooling.testing import console_script

    cluster = start("cluster-for-platform", [console_script("cluster-svc"), "serve", "--workers", str(WORKERS),
                                             "--pool-size", str(POOL_SIZE)], {"CLUSTER_DATABASE_URL": cluster_database})
    env = {"PLATFORM_DATABASE_URL": database("platform", "platform-svc", "PLATFORM_DATABASE_URL"),
           "CLUSTER_SVC_URL": cluster.url, "BENCH_CLUSTER_PID": str(cluster.worker_pids()[0])}
    account = json.loads(run_checked([console_script("platform-svc"), "create-account", "bench", "--json",
                                      "--rate-limit", "1000000"],
                                     {**os.environ, **base_env, **env}, "create-account"))
    return {**env, "BENCH_PRINCIPAL": str(account["account_id"]), "BENCH_API_KEY": account["api_key"]}


def profile_full(service: str, full: Any, wrk: Any, logs: Path) -> list[str]:
    """py-spy (GIL holder) on the unpatched worker while wrk drives it: which layer its CPU goes to."""
    import subprocess

    from bench.processes import py_spy
    from bench.profile import summarize

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
             f"  {'variant':<19}{'what it changes':<72}{'µs/req':>8}{'Δ µs':>8}  {'p50 ms':>7}"
             + ("  cluster_svc µs" if service == "platform" else "")]
    for name, contender in contenders:
        cpu = contender.cpu_median("worker") * 1000
        delta = "" if name == "full" else f"{cpu - base:+8.0f}"
        extra = f"  {contender.cpu_median('cluster_svc') * 1000:14.0f}" if service == "platform" else ""
        lines.append(f"  {name:<19}{VARIANTS[name][0]:<72}{cpu:8.0f}{delta:>8}  {contender.latency_median(0):7.2f}"
                     + extra)
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":
        port = int(argv[argv.index("--port") + 1])
        serve(argv[1], argv[2], port)
        return 0
    if argv and argv[0] == "call":  # one variant of --in-process
        service, variant = argv[1], argv[2]
        app = build_logged(service, variant)
        in_process.child(app, service, TOKEN if service == "cluster" else os.environ["BENCH_API_KEY"])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service", choices=["cluster", "platform", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=3, help="seconds per variant per round")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--only", help="comma-separated variants (full is always run)")
    parser.add_argument("--profile", action="store_true", help="also py-spy the unpatched worker (needs py-spy)")
    parser.add_argument("--in-process", action="store_true",
                        help="call each variant's app in its own process, no server (bench/layers_inprocess.py)")
    parser.add_argument("--requests", type=int, default=2000, help="--in-process: calls per variant per round")
    args = parser.parse_args(argv)
    started = time.monotonic()
    text = measure(args)
    how = (f"{args.requests} calls in process" if args.in_process
           else f"{args.duration} s served by gunicorn --workers {WORKERS}")
    print(f"\nbench.layers, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {args.rounds} rounds x {how}"
          f" per variant, alternated; {POOL_SIZE} pooled DB connections; elapsed {(time.monotonic() - started) / 60:.1f} min")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
