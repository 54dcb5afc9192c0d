"""``make run``: the whole pair on this machine, until Ctrl-C.

Starts an embedded PostgreSQL (unless the database URLs are in the
environment), creates one database per service, migrates both, then runs the
processes in ``Procfile`` under honcho, which prefixes each log line with its
process name and stops them all on Ctrl-C.
"""
from __future__ import annotations

import os
import secrets
import shlex
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
# (variable the Procfile reads, default)
PORTS = [("PLATFORM_PORT", "8000"), ("CLUSTER_PORT", "8001"), ("RECONCILER_METRICS_PORT", "8002")]
# What another terminal needs for every command of the README's walkthrough:
# create-account and sync-status read the database, repair and reconcile also
# call cluster_svc.
EXPORTS = ["PLATFORM_DATABASE_URL", "CLUSTER_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN"]
ENV_FILE = DEV / "env"


def main() -> int:
    DEV.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.setdefault("INTERNAL_TOKEN", _dev_token())
    for var, default in PORTS:
        env[var] = env.get(var, "").strip() or default
    env.setdefault("CLUSTER_SVC_URL", f"http://127.0.0.1:{env['CLUSTER_PORT']}")
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
    _write_env_file(env)
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


def _write_env_file(env: dict[str, str]) -> None:
    """``.dev/env``: one ``export`` per setting the CLI needs, for ``. .dev/env`` in another terminal.

    Readable by its owner only: it holds the internal token.
    """
    lines = ["# Written by `make run`: `. .dev/env` in another terminal, in this folder."]
    lines += [f"export {var}={shlex.quote(env[var])}" for var in EXPORTS]
    fd = os.open(ENV_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file was there already
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")


def _print_welcome(env: dict[str, str]) -> None:
    platform, cluster = f"http://127.0.0.1:{env['PLATFORM_PORT']}", env["CLUSTER_SVC_URL"]
    exports = "\n".join(
        f"    export {var}=" + ('"$(cat .dev/internal_token)"' if var == "INTERNAL_TOKEN" else shlex.quote(env[var]))
        for var in EXPORTS
    )
    print(
        f"""
platform_svc {platform}   (public API; docs at /docs)
cluster_svc  {cluster}   (internal; token in .dev/internal_token)
reconciler   pushes whatever cluster_svc has not confirmed

Metrics (Prometheus text format):
  {platform}/metrics and {cluster}/metrics need the internal token:
    curl -H "Authorization: Bearer $(cat .dev/internal_token)" {platform}/metrics
  http://127.0.0.1:{env['RECONCILER_METRICS_PORT']}/metrics   the reconciler's (loopback only, no token)
  /readyz on either service says whether its database answers; LOG_FORMAT=json for JSON logs.

From another terminal in this folder, first load the settings the CLI needs:
  . .dev/env
which is the same as
{exports}
then:
  .venv/bin/platform-svc create-account demo        # prints an API key, once
  export API_KEY=<the key>
  curl -H "Authorization: Bearer $API_KEY" -H "Content-Type: application/json" \\
       -d '{{"name":"main-db","region":"eu-west-1","postgres_version":16,"plan":"standard-2","storage_gb":100}}' \\
       {platform}/v1/clusters
Ctrl-C stops everything.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
