"""The Debian packages the make targets need, in one place: ``python -m tooling.packages TARGET``.

``make test``, ``make test-scale`` and ``make run-ha`` (and so ``.ci/run``, which runs
the first two) call this before anything else. What is missing is installed with
``apt-get`` when we run as root on a machine that has it; otherwise it names the
packages and exits 1, so nothing runs half-equipped. Standard library only: it runs
before, and without, any virtualenv.

``PACKAGES_DRY_RUN=1`` (``make test PACKAGES_DRY_RUN=1``) checks the install path on a
machine that has everything: every package counts as missing, and the commands are
printed instead of run (or, when not root, the refusal is printed, exit 1).

The tests name the package of a missing command through :func:`package_of`, and fail
(never skip) without it: a skipped test would stand in for a feature never checked.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

# Each Debian package, by the commands of it something here runs.
PACKAGES = {
    # `docker-compose config` validates docker-compose.yml (tests/test_deployment.py; no engine needed).
    "docker-compose": ("docker-compose",),
    # promtool checks the shipped configuration and alert rules (tests/test_deployment.py);
    # a real prometheus scrapes the pair (tests/e2e/test_prometheus.py).
    "prometheus": ("prometheus", "promtool"),
    # The pooler in transaction mode (tooling/pgbouncer.py: tests/scale, make run-ha).
    "pgbouncer": ("pgbouncer",),
    # The production shape (tooling/ha.py: tests/scale, make run-ha): Patroni elects its
    # primaries in etcd, HAProxy routes to them and balances the service replicas.
    "etcd-server": ("etcd",),
    "haproxy": ("haproxy",),
    # The PostgreSQL Patroni runs (tooling/ha.py's HA_PG_BIN); Debian keeps its programs
    # off PATH, so it is found by its path.
    "postgresql-15": ("/usr/lib/postgresql/15/bin/postgres",),
    # The operator's console seen in a real browser (tests/e2e/test_console.py): headless
    # Chromium driven by Selenium through Debian's chromedriver (no browser download).
    "chromium": ("chromium",),
    "chromium-driver": ("chromedriver",),
    # Runs one service under a skewed or jumping clock (tests/e2e/test_clocks.py).
    "faketime": ("faketime",),
    # The HTTP load generator of make bench (bench/run.py, bench/layers.py, bench/flood.py).
    "wrk": ("wrk",),
}
# What each make target needs. test-scale runs tests/scale, which starts the production shape.
TARGETS = {
    "test": ("docker-compose", "prometheus", "chromium", "chromium-driver", "faketime"),
    "test-scale": ("pgbouncer", "etcd-server", "haproxy", "postgresql-15"),
    "run-ha": ("etcd-server", "haproxy", "pgbouncer", "postgresql-15"),
    "bench": ("wrk",),
}
# Debian puts daemons in sbin, which is not on every user's PATH.
SYSTEM_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


def find(command: str) -> str | None:
    """The path of ``command``: itself when it is one, on PATH, or in the system's own folders."""
    if os.path.isabs(command):
        return command if os.access(command, os.X_OK) else None
    found = shutil.which(command)
    if found:
        return found
    return next((path for path in (os.path.join(d, command) for d in SYSTEM_DIRS) if os.access(path, os.X_OK)), None)


def package_of(command: str) -> str:
    """The Debian package that brings ``command``."""
    return next(package for package, commands in PACKAGES.items() if command in commands)


def missing(packages: tuple[str, ...] | list[str]) -> list[str]:
    """Those of ``packages`` with a command not installed."""
    return [package for package in packages if any(find(command) is None for command in PACKAGES[package])]


def dry_run() -> bool:
    return os.environ.get("PACKAGES_DRY_RUN", "").strip() not in ("", "0")


def ensure(target: str) -> int:
    """Install what ``target`` needs and lacks (as root, with apt-get); the exit status."""
    needed = list(TARGETS[target]) if dry_run() else missing(TARGETS[target])
    if not needed:
        return 0
    names = " ".join(needed)
    if os.geteuid() != 0 or find("apt-get") is None:
        print(f"make {target} needs the Debian packages {names}: apt-get install them (as root), "
              "or run make as root, which installs them.", file=sys.stderr)
        return 1
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    commands = [["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *needed]]
    print(f"make {target}: installing the Debian packages {names}", flush=True)
    for argv in commands:
        if dry_run():
            print(f"(dry run) {' '.join(argv)}", flush=True)
            continue
        # apt-get's progress is noise here; its errors (stderr) are not.
        result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False)
        if result.returncode != 0:
            print(f"make {target}: `{' '.join(argv)}` failed ({result.returncode})", file=sys.stderr)
            return result.returncode
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in TARGETS:
        print(f"usage: python -m tooling.packages {{{','.join(TARGETS)}}}", file=sys.stderr)
        return 2
    return ensure(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
