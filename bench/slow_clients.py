"""Property 10, measured: request latency while slow and idle clients hold connections.

    python -m bench.slow_clients [--silent 64] [--tricklers 16] [--interval 2] [--seconds 20]

Starts cluster_svc and platform_svc through their ``serve`` commands (as
users run them) on an embedded PostgreSQL (or ``TEST_DATABASE_URL``), opens
the silent connections and the header tricklers against each, then times
fresh requests (``GET /healthz`` and an authenticated read that uses the
database) for ``--seconds``, and reports how long the tricklers stayed
connected.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
import uuid
from contextlib import ExitStack

import requests

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tooling.slowclients import open_silent, start_tricklers
from tooling.testing import LiveServer, console_script, fresh_database, postgres_server

TOKEN = "slow-clients-token"


def timed(method: str, url: str, **kwargs) -> float:
    """Seconds a fresh connection took to get an answer (120 s at most)."""
    started = time.monotonic()
    try:
        requests.request(method, url, timeout=120, **kwargs).raise_for_status()
    except requests.RequestException:
        return float("inf")
    return time.monotonic() - started


def measure(name: str, server: LiveServer, read: tuple[str, dict], args: argparse.Namespace) -> dict:
    path, headers = read
    with ExitStack() as stack:
        open_silent("127.0.0.1", server.port, args.silent, stack)
        tricklers = start_tricklers("127.0.0.1", server.port, args.tricklers, interval=args.interval, stack=stack)
        time.sleep(0.5)  # let every connection reach the server
        samples: dict[str, list[float]] = {"healthz": [], "read": []}
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            samples["healthz"].append(timed("GET", server.url + "/healthz"))
            samples["read"].append(timed("GET", server.url + path, headers=headers))
        drop_deadline = time.monotonic() + args.drop_wait
        while time.monotonic() < drop_deadline and any(t.dropped_after is None for t in tricklers):
            time.sleep(0.2)
        dropped = [t.dropped_after for t in tricklers if t.dropped_after is not None]
    result = {
        "service": name,
        **{f"{kind}_{stat}": round(fn(values), 3) for kind, values in samples.items()
           for stat, fn in (("median_s", statistics.median), ("max_s", max))},
        "requests": sum(len(v) for v in samples.values()),
        "tricklers_dropped": f"{len(dropped)}/{len(tricklers)}",
        "trickler_dropped_after_s": round(max(dropped), 1) if dropped else None,
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--silent", type=int, default=64)
    parser.add_argument("--tricklers", type=int, default=16)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between a trickler's header lines")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to send timed requests")
    parser.add_argument("--drop-wait", type=float, default=60.0, help="how long to wait for tricklers to be dropped")
    args = parser.parse_args()

    with postgres_server() as server_url, ExitStack() as stack:
        cluster_url = fresh_database(server_url, "slow_cluster", migrations=CLUSTER_MIGRATIONS)
        platform_url = fresh_database(server_url, "slow_platform", migrations=PLATFORM_MIGRATIONS)
        cluster = stack.enter_context(LiveServer(
            [console_script("cluster-svc"), "serve"],
            {"CLUSTER_DATABASE_URL": cluster_url, "INTERNAL_TOKEN": TOKEN},
        ))
        platform_env = {"PLATFORM_DATABASE_URL": platform_url, "INTERNAL_TOKEN": TOKEN, "CLUSTER_SVC_URL": cluster.url}
        platform = stack.enter_context(LiveServer([console_script("platform-svc"), "serve"], platform_env))
        account = json.loads(subprocess.run(
            [console_script("platform-svc"), "create-account", "slow", "--json"],
            env={**platform.env}, check=True, capture_output=True, text=True,
        ).stdout)
        measure("cluster_svc", cluster,
                (f"/v1/clusters?team_id={uuid.uuid4()}", {"Authorization": f"Bearer {TOKEN}"}), args)
        measure("platform_svc", platform,
                ("/v1/clusters", {"Authorization": f"Bearer {account['api_key']}"}), args)


if __name__ == "__main__":
    main()
