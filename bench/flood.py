"""P13: one account's flood does not slow another account down (docs/performance.md).

A noisy account sends public creates over 64 keep-alive connections (``wrk -t2
-c64``, bench/post.lua's ``public`` mode, ignoring every 429 and its
Retry-After, as a runaway client would) while a quiet account sends single
creates at one connection (``wrk -t1 -c1``). The quiet account's p50 with the
flood is compared with its p50 alone, rounds alternated; target: at most 2x.

``make bench`` runs it at the end (:func:`measure`, on its services); alone:

    python -m bench.flood [--rounds 3] [--duration 5] [--noisy-limit N]

starts PostgreSQL (embedded unless ``TEST_DATABASE_URL``), cluster_svc and
platform_svc with their console scripts (``serve --workers 2``), and makes the
two accounts (the noisy one with the default limit, ``ACCOUNT_RATE_LIMIT``, or
``--noisy-limit``; ``--noisy-limit 1000000`` shows the flood with no limit).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = Path(__file__).with_name("post.lua")
TARGET = 2.0  # the quiet account's p50 flooded / alone, at most


@dataclass
class Flood:
    connections: int
    alone: list[float] = field(default_factory=list)  # the quiet account's p50 per round, ms
    flooded: list[float] = field(default_factory=list)
    alone_p99: list[float] = field(default_factory=list)
    flooded_p99: list[float] = field(default_factory=list)
    noisy: Counter = field(default_factory=Counter)  # the noisy account's answers, by status
    noisy_seconds: float = 0.0
    quiet_bad: int = 0  # the quiet account's answers other than 201 synced

    @property
    def ratio(self) -> float:
        return statistics.median(self.flooded) / statistics.median(self.alone)

    @property
    def passed(self) -> bool:
        return self.ratio <= TARGET

    def summary(self) -> str:
        noisy = ", ".join(f"{status} {n / self.noisy_seconds:.0f}/s" for status, n in sorted(self.noisy.items()))
        return (
            f"P13 quiet account's p50 flooded / alone: {self.ratio:.2f} (target <= {TARGET:g}:"
            f" {'pass' if self.passed else 'FAIL'}); p50 {statistics.median(self.flooded):.2f} /"
            f" {statistics.median(self.alone):.2f} ms, p99 {statistics.median(self.flooded_p99):.2f} /"
            f" {statistics.median(self.alone_p99):.2f} ms; per round flooded"
            f" {', '.join(f'{p:.2f}' for p in self.flooded)}, alone {', '.join(f'{p:.2f}' for p in self.alone)};"
            f" the noisy account (-c{self.connections}) answered {noisy}; quiet answers not 201 synced: {self.quiet_bad}"
        )


def wrk(url: str, api_key: str, *, threads: int, connections: int, seconds: float) -> subprocess.Popen:
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "5s",
            "-s", str(LUA), url, "--", "public", api_key]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    line = next((line for line in out.splitlines() if line.startswith("BENCH ")), None)
    if process.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed:\n{out}{err}")
    return json.loads(line[len("BENCH "):])


def measure(platform_url: str, quiet_key: str, noisy_key: str, *, rounds: int = 3, duration: float = 5,
            connections: int = 64, log: Callable[[str], None] = print) -> Flood:
    """Alternate rounds of the quiet account alone and under the noisy account's flood."""
    url = platform_url + "/v1/clusters"
    flood = Flood(connections)
    result(wrk(url, quiet_key, threads=1, connections=1, seconds=1))  # warm-up
    for r in range(1, rounds + 1):
        order = ("alone", "flooded") if r % 2 else ("flooded", "alone")
        for how in order:
            noisy = None
            if how == "flooded":
                noisy = wrk(url, noisy_key, threads=2, connections=connections, seconds=duration + 2)
                time.sleep(1)  # the flood is at full strength before the quiet account is timed
            quiet = result(wrk(url, quiet_key, threads=1, connections=1, seconds=duration))
            p50, p99 = quiet["p50_us"] / 1000, quiet["p99_us"] / 1000
            flood.quiet_bad += quiet["requests"] - quiet["synced"]
            if noisy is not None:
                noisy_result = result(noisy)
                flood.noisy.update({int(status): n for status, n in noisy_result["status"].items()})
                flood.noisy_seconds += noisy_result["duration_us"] / 1e6
                flood.flooded.append(p50)
                flood.flooded_p99.append(p99)
            else:
                flood.alone.append(p50)
                flood.alone_p99.append(p99)
            time.sleep(1.5)  # the noisy account's window, and the backlog, pass
        log(f"  P13 round {r}/{rounds}: quiet p50 alone {flood.alone[-1]:.2f} ms, flooded {flood.flooded[-1]:.2f} ms")
    return flood


def main(argv: list[str] | None = None) -> int:
    from bench.processes import Server, run_checked
    from tooling.testing import console_script, fresh_database, postgres_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5, help="seconds the quiet account is timed per round")
    parser.add_argument("--connections", type=int, default=64, help="the noisy account's wrk connections")
    parser.add_argument("--noisy-limit", type=int, help="the noisy account's own limit (default: ACCOUNT_RATE_LIMIT)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench: wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)", file=sys.stderr)
        return 2
    token = "bench-internal-token"
    base_env = {"INTERNAL_TOKEN": token,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    logs = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    serving = ["--workers", str(args.workers), "--pool-size", "8"]
    with ExitStack() as stack:
        server_url = stack.enter_context(postgres_server())
        urls = {}
        for name, script, variable in (("cluster", "cluster-svc", "CLUSTER_DATABASE_URL"),
                                       ("platform", "platform-svc", "PLATFORM_DATABASE_URL")):
            urls[variable] = fresh_database(server_url, f"bench_flood_{name}")
            run_checked([console_script(script), "migrate"], {**os.environ, **base_env, variable: urls[variable]},
                        "migrate")

        def start(name, script, env):
            server = Server(name, [console_script(script), "serve", *serving], {**base_env, **env}, logs)
            stack.callback(server.stop)
            return server.start()

        cluster = start("cluster_svc", "cluster-svc", {"CLUSTER_DATABASE_URL": urls["CLUSTER_DATABASE_URL"]})
        platform_env = {"PLATFORM_DATABASE_URL": urls["PLATFORM_DATABASE_URL"], "CLUSTER_SVC_URL": cluster.url}
        platform_server = start("platform_svc", "platform-svc", platform_env)
        cli_env = {**os.environ, **base_env, **platform_env}

        def account(name: str, *limit: str) -> str:
            made = run_checked([console_script("platform-svc"), "create-account", name, "--json", *limit], cli_env,
                               "create-account")
            return json.loads(made)["api_key"]

        quiet = account("quiet")
        noisy = account("noisy", *(("--rate-limit", str(args.noisy_limit)) if args.noisy_limit else ()))
        print(f"bench: P13, {args.rounds} rounds x {args.duration:g} s; service logs in {logs}", flush=True)
        flood = measure(platform_server.url, quiet, noisy, rounds=args.rounds, duration=args.duration,
                        connections=args.connections)
    print(flood.summary())
    return 0 if flood.passed else 1


if __name__ == "__main__":
    sys.exit(main())
