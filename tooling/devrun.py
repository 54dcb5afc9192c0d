"""``make run``: the whole pair on this machine, until Ctrl-C.

Starts an embedded PostgreSQL (unless the database URLs are in the
environment), creates one database per service, migrates both, then runs the
processes in ``Procfile`` under honcho, which prefixes each log line with its
process name and stops them all on Ctrl-C.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tooling import embedded_pg

ROOT = Path.cwd()
DEV = ROOT / ".dev"
# (database URL variable, database name, console script that migrates it)
SERVICES = [
    ("CLUSTER_DATABASE_URL", "cluster", "cluster-svc"),
    ("PLATFORM_DATABASE_URL", "platform", "platform-svc"),
]


def main() -> int:
    DEV.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.setdefault("INTERNAL_TOKEN", _dev_token())
    env.setdefault("CLUSTER_SVC_URL", "http://127.0.0.1:8001")
    server = None
    if not all(env.get(var) for var, _, _ in SERVICES):
        print("Starting the embedded PostgreSQL in .dev/pg ...", flush=True)
        server = embedded_pg.start(DEV / "pg")
        admin = embedded_pg.admin_url(server)
        for var, name, _ in SERVICES:
            env.setdefault(var, embedded_pg.ensure_database(admin, name))
    bin_dir = Path(sys.executable).parent
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    for _, _, script in SERVICES:
        subprocess.run([script, "migrate"], env=env, check=True)
    _print_welcome(env)
    honcho = subprocess.Popen([shutil.which("honcho", path=env["PATH"]), "-f", str(ROOT / "Procfile"), "start"], env=env)
    # Ctrl-C reaches honcho through the terminal; a SIGTERM sent to us alone is
    # passed on, so that nothing outlives `make run`.
    signal.signal(signal.SIGTERM, lambda *_: honcho.terminate())
    try:
        while True:
            try:
                return honcho.wait()
            except KeyboardInterrupt:
                continue  # honcho got the same Ctrl-C and is stopping its processes
    finally:
        if server is not None:
            embedded_pg.stop(server)


def _dev_token() -> str:
    """A token kept in .dev/ so curl sessions keep working across restarts."""
    path = DEV / "internal_token"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
    return path.read_text().strip()


def _print_welcome(env: dict[str, str]) -> None:
    print(
        f"""
platform_svc http://127.0.0.1:8000   (public API; docs at /docs)
cluster_svc  http://127.0.0.1:8001   (internal; token in .dev/internal_token)
reconciler   pushes whatever cluster_svc has not confirmed (and purges the platform's expired deleted rows hourly)
purge        removes cluster_svc's tombstones past the ID horizon (ID_HORIZON_SECONDS, 30 days), hourly

Metrics (Prometheus text format):
  http://127.0.0.1:8000/metrics and http://127.0.0.1:8001/metrics need the internal token:
    curl -H "Authorization: Bearer $(cat .dev/internal_token)" http://127.0.0.1:8000/metrics
  http://127.0.0.1:8002/metrics   the reconciler's (loopback only, no token)
  /readyz on either service says whether its database answers; LOG_FORMAT=json for JSON logs.

First call, from another terminal in this folder:
  export PLATFORM_DATABASE_URL='{env["PLATFORM_DATABASE_URL"]}'
  .venv/bin/platform-svc create-account demo        # prints an API key, once
  export API_KEY=<the key>
  curl -H "Authorization: Bearer $API_KEY" -H "Content-Type: application/json" \\
       -d '{{"name":"main-db","region":"eu-west-1","postgres_version":16,"plan":"standard-2","storage_gb":100}}' \\
       http://127.0.0.1:8000/v1/clusters
Ctrl-C stops everything.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
