"""The per-layer cost of a create without the server: ``python -m bench.layers --in-process``.

The served measurement (bench/layers.py) reads a worker's CPU from /proc while wrk drives it
over a socket: what it reports is the real cost, and on a shared 2-core machine it moves by
±300 µs a request between runs of the same server, more than most layers cost. This one
takes the server and the second process out of the figure: each variant is the same app
(``bench.layers.build``: the service's factory, then the variant's patch) in a process of its
own, called as a WSGI server calls it (an environ, a body, ``start_response``) by a loop in
that process, and a request's cost is that process's CPU (``time.process_time``) over
``--requests`` calls, divided by them. The requests are made before the clock starts. Variants
stay alive side by side and run one at a time, alternated round by round; the table gives
the median round and the fastest. What it cannot show is the server (gunicorn, gevent, granian): those variants are
measured served only.

platform_svc's app pushes each create to a cluster_svc served as ``make bench`` serves it,
over real HTTP: the figure is platform_svc's own CPU, as its worker's is in the served table.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

SERVED_ONLY = {"gthread", "granian", "json_log"}
TEAM = "0193a1b2-7c00-7000-8000-0000000000aa"
CLUSTER = {"name": "bench", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}


def child(app: Any, service: str, token: str) -> None:
    """One variant's process (``python -m bench.layers call SERVICE VARIANT``), its ``app`` built:
    answer each line ``N`` of stdin with the CPU µs of N creates, one line of stdout each."""
    from werkzeug.test import EnvironBuilder

    statuses: list[str] = []

    def start_response(status: str, headers: list, exc_info: Any = None) -> None:
        statuses.append(status)

    def environs(count: int) -> list[dict[str, Any]]:
        """``count`` requests as a WSGI server hands them over (a new cluster ID each, for cluster_svc)."""
        if service == "cluster":
            import uuid6

            bodies = [{"id": str(uuid6.uuid7()), "team_id": TEAM, **CLUSTER} for _ in range(count)]
        else:
            bodies = [CLUSTER] * count
        return [EnvironBuilder("/v1/clusters", method="POST", json=body,
                               headers={"Authorization": f"Bearer {token}"}).get_environ() for body in bodies]

    def call(environ: dict[str, Any]) -> None:
        answer = app(environ, start_response)
        for _ in answer:
            pass
        getattr(answer, "close", lambda: None)()

    for line in sys.stdin:
        count = int(line)
        prepared = environs(count)
        statuses.clear()
        started = time.process_time()
        for environ in prepared:
            call(environ)
        spent = time.process_time() - started
        refused = [status for status in statuses if not status.startswith("201")]
        print(json.dumps({"us": spent * 1e6 / count, "refused": refused[:3]}), flush=True)


class Variant:
    """A variant's live process, driven over its stdin and stdout."""

    def __init__(self, service: str, name: str, env: dict[str, str], log: Any) -> None:
        self.name = name
        self.samples: list[float] = []
        self.problems: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.layers", "call", service, name],
            env={**os.environ, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            text=True)

    def run(self, count: int) -> None:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"variant {self.name} ended (exit {self.process.wait()})")
        answer = json.loads(line)
        self.samples.append(answer["us"])
        if answer["refused"]:
            self.problems.append(f"answered {answer['refused']}")

    def stop(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def measure(service: str, names: list[str], env: dict[str, str], log: Any, *, rounds: int, requests: int) -> list[str]:
    """The table for one service: each variant's CPU µs a request (its median and fastest round), and
    their differences from ``full``."""
    from bench.layer_stubs import VARIANTS

    variants = [Variant(service, name, env, log) for name in names if name not in SERVED_ONLY]
    try:
        for variant in variants:
            variant.run(max(requests // 4, 50))  # warm-up: caches, pools, the first flushes
            variant.samples.clear()
        for r in range(rounds):
            shift = r % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                variant.run(requests)
            print(f"layers --in-process: {service} round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for variant in variants:
            variant.stop()
    # Another process's load only ever adds to a round, so the fastest round is the steadier figure.
    base, base_min = statistics.median(variants[0].samples), min(variants[0].samples)
    lines = ["", f"{service}, in process: CPU µs per create of the app's own process ({requests} calls a round,"
             f" {rounds} rounds: the median and the fastest round, each with its difference from full)",
             f"  {'variant':<19}{'what it changes':<72}{'median':>8}{'Δ':>7}{'fastest':>9}{'Δ':>7}"]
    for variant in variants:
        median, fastest = statistics.median(variant.samples), min(variant.samples)
        deltas = ("", "") if variant.name == "full" else (f"{median - base:+7.0f}", f"{fastest - base_min:+7.0f}")
        lines.append(f"  {variant.name:<19}{VARIANTS[variant.name][0]:<72}{median:8.0f}{deltas[0]:>7}"
                     f"{fastest:9.0f}{deltas[1]:>7}")
        lines += [f"  WARNING {variant.name}: {problem}" for problem in variant.problems[:1]]
    return lines
