"""``make run``: the whole pair on this machine, until Ctrl-C.

Starts an embedded PostgreSQL (unless the database URLs are in the
environment), creates one database per service, migrates both, then runs the
processes in ``Procfile`` under honcho's process manager, which prefixes each
log line with its process name. Ctrl-C stops them all and exits 0, quietly.

It writes ``.dev/env``: the exports another terminal needs to use the CLI
against this pair (``. .dev/env``). The ports come from ``PLATFORM_PORT``,
``CLUSTER_PORT`` and ``RECONCILER_METRICS_PORT`` (8000, 8001, 8002 by default).
"""
from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from honcho.environ import expand_processes, parse_procfile
from honcho.manager import Manager
from honcho.printer import Printer

from tooling import embedded_pg

ROOT = Path.cwd()
DEV = ROOT / ".dev"
# (database URL variable, database name, console script that migrates it)
SERVICES = [
    ("CLUSTER_DATABASE_URL", "cluster_svc", "cluster-svc"),
    ("PLATFORM_DATABASE_URL", "platform_svc", "platform-svc"),
]
# (variable the Procfile reads, default)
PORTS = [("PLATFORM_PORT", "8000"), ("CLUSTER_PORT", "8001"), ("RECONCILER_METRICS_PORT", "8002")]
# What another terminal needs for every command of the README's walkthrough:
# create-account and sync-status read the database, repair and reconcile also
# call cluster_svc.
EXPORTS = ["PLATFORM_DATABASE_URL", "CLUSTER_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN"]
ENV_FILE = DEV / "env"


def main() -> int:
    """Run the pair until Ctrl-C (or SIGTERM): then 0, quietly; a process's own exit code if one stopped by itself."""
    # Until the processes run, a stop request (Ctrl-C reaches us through the
    # terminal; SIGTERM may be sent to us alone) ends start-up like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    server = None
    try:
        DEV.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.setdefault("INTERNAL_TOKEN", _dev_token())
        for var, default in PORTS:
            env[var] = env.get(var, "").strip() or default
        env.setdefault("CLUSTER_SVC_URL", f"http://127.0.0.1:{env['CLUSTER_PORT']}")
        if not all(env.get(var) for var, _, _ in SERVICES):
            print("Starting the embedded PostgreSQL in .dev/pg ...", flush=True)
            server = embedded_pg.start(DEV / "pg")
            admin = embedded_pg.admin_url(server)
            for var, name, _ in SERVICES:
                env.setdefault(var, embedded_pg.ensure_database(admin, name))
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        migrate_databases(env)
        _write_env_file(env)
        _print_welcome(env)
        manager = _manager(env)
        manager.loop()
        return 0 if manager.stop_requested else manager.returncode
    except KeyboardInterrupt:
        return 0  # stopped before the processes ran: nothing else to say
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if server is not None:
            embedded_pg.stop(server)


def migrate_databases(env: dict[str, str]) -> None:
    """Each service's ``migrate`` command (the console scripts beside this interpreter), on the
    database its variable in ``env`` names; also ``make run-ha``'s (tooling.ha)."""
    for _, _, script in SERVICES:
        subprocess.run([str(Path(sys.executable).with_name(script)), "migrate"], env=env, check=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class _Manager(Manager):
    """honcho's process manager (as ``honcho start`` runs it), quiet about a stop that was asked for.

    honcho answers Ctrl-C with "SIGINT received", a "sending SIGTERM" and a
    "stopped (rc=-15)" line per process (the exit codes of the shells it
    killed) and exit status 130, which ``make`` reports as an error. Here a
    Ctrl-C or SIGTERM stops every process the same way (SIGTERM to each
    process group, SIGKILL after 5 s) without those lines, and :func:`main`
    exits 0. When a process stops by itself, honcho's lines and exit code stay.
    """

    stop_requested = False

    def _start(self) -> None:
        super()._start()
        # loop() installed honcho's own handlers just before calling this: ours replace them.
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, signum: int, frame: object) -> None:
        self.stop_requested = True
        self.terminate()

    def _system_print(self, data: str) -> None:
        if not self.stop_requested:
            super()._system_print(data)


def _manager(env: dict[str, str]) -> _Manager:
    """The processes of the Procfile, named as honcho names them (``cluster.1``, ...), each with ``env``."""
    manager = _Manager(Printer(sys.stdout))
    procfile = parse_procfile((ROOT / "Procfile").read_text())
    for process in expand_processes(procfile.processes):
        manager.add_process(process.name, process.cmd, quiet=process.quiet, env={**env, **process.env})
    return manager


def _dev_token() -> str:
    """A token kept in .dev/ so curl sessions keep working across restarts."""
    path = DEV / "internal_token"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # readable by its owner only, as .dev/env (also when it was there already)
    with os.fdopen(fd, "r+") as token_file:
        token = token_file.read().strip()
        if not token:
            token = secrets.token_urlsafe(24)
            token_file.write(token)
    return token


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
    platform, internal = f"http://127.0.0.1:{env['PLATFORM_PORT']}", env["CLUSTER_SVC_URL"]
    exports = "\n".join(
        f"    export {var}=" + ('"$(cat .dev/internal_token)"' if var == "INTERNAL_TOKEN" else shlex.quote(env[var]))
        for var in EXPORTS
    )
    print(
        f"""
platform_svc {platform}   (public API; docs at /docs; the operator's console at /console)
cluster_svc  {internal}   (internal; token in .dev/internal_token)
reconciler   pushes whatever cluster_svc has not confirmed (and purges the platform's expired deleted rows hourly)
purge        removes cluster_svc's tombstones past the ID horizon (ID_HORIZON_SECONDS, 30 days), hourly

Metrics (Prometheus text format):
  {platform}/metrics and {internal}/metrics need the internal token:
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
and go on with the README's walkthrough ("The public flow"), or try the API from {platform}/docs.
The operator's console is {platform}/console:
  .venv/bin/platform-svc create-operator me          # prints its secret, once: log in with it
Ctrl-C stops everything.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
