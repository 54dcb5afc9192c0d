"""P13: no flood slows another account down (docs/performance.md).

While a noisy client floods platform_svc, a quiet account sends single public
creates at one connection (``wrk -t1 -c1``); its p50 under the flood is
compared with its p50 alone, rounds alternated. Four floods (:data:`FLOODS`):

- ``creates``: the noisy account's public creates over 64 keep-alive
  connections (``wrk -t2 -c64``, bench/post.lua's ``public`` mode), ignoring
  every 429 and its Retry-After, as a runaway client would;
- ``replays``: the same, every request with one Idempotency-Key;
- ``unknown keys``: the same, each request with a well-formed key nobody holds;
- ``silent sockets``: 2,000 connections that send nothing, each one the
  server closes opened again at once (tooling.slowclients.SilentHorde).

Target: the quiet account's p50 flooded at most 1.5x its p50 alone, each flood.

``make bench`` runs them at the end (:func:`measure`, on its services); alone:

    python -m bench.flood [--rounds 3] [--duration 5] [--noisy-limit N] [--flood creates ...] [--costs]

starts PostgreSQL (embedded unless ``TEST_DATABASE_URL``), cluster_svc and
platform_svc with their console scripts (``serve --workers 2``), and makes the
two accounts (the quiet one's limit out of its way, the noisy one with the default limit, ``ACCOUNT_RATE_LIMIT``, or
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
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
LUA = Path(__file__).with_name("post.lua")
TARGET = 1.5  # the quiet account's p50 flooded / alone, at most
FLOODS = ("creates", "replays", "unknown keys", "silent sockets")
SILENT = 2000
QUIET_LIMIT = 1_000_000  # the quiet account is timed at full speed on one connection: its own limit out of the way


@dataclass
class Flood:
    kind: str
    connections: int
    alone: list[float] = field(default_factory=list)  # the quiet account's p50 per round, ms
    flooded: list[float] = field(default_factory=list)
    alone_p99: list[float] = field(default_factory=list)
    flooded_p99: list[float] = field(default_factory=list)
    noisy: Counter = field(default_factory=Counter)  # the noisy client's answers, by status (or reopened sockets)
    noisy_seconds: float = 0.0
    quiet_bad: int = 0  # the quiet account's answers other than 201 synced

    @property
    def ratio(self) -> float:
        return statistics.median(self.flooded) / statistics.median(self.alone)

    @property
    def passed(self) -> bool:
        return self.ratio <= TARGET

    def summary(self) -> str:
        noisy = ", ".join(f"{status} {n / max(self.noisy_seconds, 1e-9):.0f}/s" for status, n in sorted(self.noisy.items()))
        return (
            f"P13 ({self.kind}) quiet account's p50 flooded / alone: {self.ratio:.2f} (target <= {TARGET:g}:"
            f" {'pass' if self.passed else 'FAIL'}); p50 {statistics.median(self.flooded):.2f} /"
            f" {statistics.median(self.alone):.2f} ms, p99 {statistics.median(self.flooded_p99):.2f} /"
            f" {statistics.median(self.alone_p99):.2f} ms; per round flooded"
            f" {', '.join(f'{p:.2f}' for p in self.flooded)}, alone {', '.join(f'{p:.2f}' for p in self.alone)};"
            f" the noisy client ({self.noise()}) got {noisy or 'nothing'}; quiet answers not 201 synced: {self.quiet_bad}"
        )

    def noise(self) -> str:
        return f"{SILENT} silent sockets" if self.kind == "silent sockets" else f"-c{self.connections}"


def wrk(url: str, api_key: str, *, threads: int, connections: int, seconds: float, mode: str = "public",
        extra: tuple[str, ...] = ()) -> subprocess.Popen:
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "5s",
            "-s", str(LUA), url, "--", mode, api_key, *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    line = next((line for line in out.splitlines() if line.startswith("BENCH ")), None)
    if process.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed:\n{out}{err}")
    return json.loads(line[len("BENCH "):])


class Noise:
    """One flood, started before the quiet account is timed and ended after it."""

    def __init__(self, kind: str, url: str, noisy_key: str, connections: int) -> None:
        self.kind, self.url, self.noisy_key, self.connections = kind, url, noisy_key, connections
        self.replay_key = str(uuid.uuid4())

    def start(self, seconds: float) -> Callable[[Flood], None]:
        """Start the flood for ``seconds``; returns what records its outcome in a Flood once it ends."""
        if self.kind == "silent sockets":
            from tooling.slowclients import SilentHorde

            address = urlsplit(self.url)
            horde = SilentHorde(address.hostname, address.port, SILENT).__enter__()
            started = time.monotonic()

            def ended(flood: Flood) -> None:
                horde.__exit__(None, None, None)
                flood.noisy.update({"reopened": horde.reopened})
                flood.noisy_seconds += time.monotonic() - started
            return ended
        mode, extra = {"creates": ("public", ()), "replays": ("public-replay", (self.replay_key,)),
                       "unknown keys": ("unknown-key", ())}[self.kind]
        process = wrk(self.url, self.noisy_key, threads=2, connections=self.connections, seconds=seconds,
                      mode=mode, extra=extra)

        def recorded(flood: Flood) -> None:
            answered = result(process)
            flood.noisy.update({int(status): n for status, n in answered["status"].items()})
            flood.noisy_seconds += answered["duration_us"] / 1e6
        return recorded


def measure(platform_url: str, quiet_key: str, noisy_key: str, *, kind: str = "creates", rounds: int = 3,
            duration: float = 5, connections: int = 64, log: Callable[[str], None] = print) -> Flood:
    """Alternate rounds of the quiet account alone and under one flood (``kind``, of :data:`FLOODS`)."""
    url = platform_url + "/v1/clusters"
    flood, noise = Flood(kind, connections), Noise(kind, url, noisy_key, connections)
    result(wrk(url, quiet_key, threads=1, connections=1, seconds=1))  # warm-up
    for r in range(1, rounds + 1):
        order = ("alone", "flooded") if r % 2 else ("flooded", "alone")
        for how in order:
            ended = None
            if how == "flooded":
                ended = noise.start(duration + 2)
                time.sleep(1)  # the flood is at full strength before the quiet account is timed
            quiet = result(wrk(url, quiet_key, threads=1, connections=1, seconds=duration))
            p50, p99 = quiet["p50_us"] / 1000, quiet["p99_us"] / 1000
            flood.quiet_bad += quiet["requests"] - quiet["synced"]
            if ended is not None:
                ended(flood)
                flood.flooded.append(p50)
                flood.flooded_p99.append(p99)
            else:
                flood.alone.append(p50)
                flood.alone_p99.append(p99)
            time.sleep(1.5)  # the noisy account's window, and the backlog, pass
        log(f"  P13 ({kind}) round {r}/{rounds}: quiet p50 alone {flood.alone[-1]:.2f} ms,"
            f" flooded {flood.flooded[-1]:.2f} ms")
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
    parser.add_argument("--flood", choices=FLOODS, action="append", help="a flood to run (default: all four)")
    parser.add_argument("--costs", action="store_true", help="then P14 on the same services (bench/costs.py)")
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

        quiet = account("quiet", "--rate-limit", str(QUIET_LIMIT))
        noisy = account("noisy", *(("--rate-limit", str(args.noisy_limit)) if args.noisy_limit else ()))
        print(f"bench: P13, {args.rounds} rounds x {args.duration:g} s; service logs in {logs}", flush=True)
        floods = [measure(platform_server.url, quiet, noisy, kind=kind, rounds=args.rounds, duration=args.duration,
                          connections=args.connections) for kind in args.flood or FLOODS]
        if args.costs:
            from sqlalchemy.engine import make_url

            from bench import costs
            from bench.processes import postmaster_pid

            p14 = costs.measure(platform_server.url, server_url, make_url(urls["PLATFORM_DATABASE_URL"]).database,
                                postmaster_pid(server_url), api_key=quiet, limited_key=account("limited", "--rate-limit", "1"))
    for flood in floods:
        print(flood.summary())
    if args.costs:
        print(costs.report(p14))
    return 0 if all(flood.passed for flood in floods) else 1


if __name__ == "__main__":
    sys.exit(main())
