"""tooling/packages.py: the Debian packages make test, test-scale, run-ha and bench install.

The machine running the suite normally has them all, so the install path is
checked here with the check forced (missing commands, root or not) and apt-get
recorded instead of run; and for real through ``PACKAGES_DRY_RUN``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooling import packages

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def machine(monkeypatch):
    """A machine whose installed commands, user and apt-get runs the test decides."""

    class Machine:
        absent: set[str] = set()
        root = True
        ran: list[list[str]] = []
        fails: str | None = None  # the apt-get subcommand that fails

    def find(command):
        return None if command in Machine.absent else f"/usr/bin/{command}"

    def run(argv, **kwargs):
        Machine.ran.append(list(argv))
        assert kwargs["env"]["DEBIAN_FRONTEND"] == "noninteractive"
        return subprocess.CompletedProcess(argv, 100 if argv[1] == Machine.fails else 0)

    monkeypatch.setattr(packages, "find", find)
    monkeypatch.setattr(packages.os, "geteuid", lambda: 0 if Machine.root else 1000)
    monkeypatch.setattr(packages.subprocess, "run", run)
    monkeypatch.delenv("PACKAGES_DRY_RUN", raising=False)
    Machine.ran = []
    return Machine


def test_every_target_names_known_packages_and_the_ci_list_is_all_of_them():
    for target, needed in packages.TARGETS.items():
        assert set(needed) <= set(packages.PACKAGES), target
    every = {package for needed in packages.TARGETS.values() for package in needed}
    assert every == {
        "docker-compose", "prometheus", "chromium", "chromium-driver", "faketime",
        "pgbouncer", "etcd-server", "haproxy", "postgresql-15", "wrk",
    }
    assert packages.find("/nonexistent/bin/postgres") is None  # a program off PATH is found by its path
    assert packages.package_of("promtool") == "prometheus"
    assert packages.package_of("etcd") == "etcd-server"


def test_nothing_runs_when_everything_is_there(machine):
    assert packages.ensure("test") == 0
    assert machine.ran == []


def test_root_installs_only_what_is_missing(machine, capsys):
    machine.absent = {"promtool"}

    assert packages.ensure("test") == 0

    assert machine.ran == [["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "prometheus"]]
    assert "prometheus" in capsys.readouterr().out


def test_a_failed_apt_get_fails_the_target(machine, capsys):
    machine.absent = {"haproxy", "etcd"}
    machine.fails = "install"

    assert packages.ensure("test-scale") == 100

    assert machine.ran[-1] == ["apt-get", "install", "-y", "-qq", "etcd-server", "haproxy"]
    assert "failed" in capsys.readouterr().err


def test_anyone_else_is_told_which_packages_to_install_and_nothing_runs(machine, capsys):
    machine.absent = {"docker-compose", "prometheus"}
    machine.root = False

    assert packages.ensure("test") == 1

    assert machine.ran == []
    assert "docker-compose prometheus" in capsys.readouterr().err


def test_a_dry_run_takes_every_package_for_missing_and_runs_nothing(machine, monkeypatch, capsys):
    monkeypatch.setenv("PACKAGES_DRY_RUN", "1")

    assert packages.ensure("run-ha") == 0

    assert machine.ran == []
    out = capsys.readouterr().out
    assert "(dry run) apt-get update -qq" in out
    assert "(dry run) apt-get install -y -qq etcd-server haproxy pgbouncer" in out


def test_the_command_make_runs_needs_only_the_standard_library():
    """make runs it with $(PYTHON), before .venv exists: here the system's Python, if any."""
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    result = subprocess.run(
        [python, "-m", "tooling.packages", "test-scale"], cwd=ROOT,
        env={**os.environ, "PACKAGES_DRY_RUN": "1"}, capture_output=True, text=True, timeout=30,
    )
    assert ("(dry run) apt-get install" in result.stdout) == (os.geteuid() == 0), result.stdout + result.stderr
    assert result.returncode == (0 if os.geteuid() == 0 else 1)
    assert "Error" not in result.stderr
