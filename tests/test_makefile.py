"""The Makefile's install steps, as `make -n` shows them on a fresh clone (no .venv yet).

`make run` needs the services, the embedded PostgreSQL and honcho, not the test
tools; `make test` needs those too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# As from a terminal, also when these tests run under `make test` (no sub-make).
# uv installs into .venv, which pip gave it; with the .pyc files, which this machine's
# PYTHONDONTWRITEBYTECODE would otherwise leave every process to compile again.
UV = ".venv/bin/python -m pip install --quiet 'uv>=0.9,<1'"
INSTALL = ".venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode --config-settings editable_mode=compat"
MAKE_VARIABLES = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR")


def planned(target: str, tmp_path: Path, *, installed: tuple[str, ...] = ()) -> str:
    """The commands `make -n TARGET` would run in a fresh copy of the Makefile and its inputs."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed (Debian's make package)", pytrace=False)
    for name in ("Makefile", "setup.cfg", "pyproject.toml", "client/pyproject.toml"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    for stamp in installed:  # made after the inputs, so up to date, in a virtualenv that exists
        (tmp_path / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
        (tmp_path / ".venv" / "bin" / "python").touch()
        (tmp_path / ".venv" / "bin" / "uv").touch()
        (tmp_path / ".venv" / stamp).touch()
    environ = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    result = subprocess.run(
        ["make", "-n", target], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_installs_the_runtime_and_its_runners_but_not_the_test_extras(tmp_path):
    commands = planned("run", tmp_path)

    assert "-m venv .venv" in commands
    assert f"{INSTALL} -e './client[async]' -e '.[dev]'" in commands
    assert "[test]" not in commands
    assert commands.rstrip().endswith(".venv/bin/python -m tooling.devrun")


def test_make_test_installs_everything_it_needs_with_one_install_on_a_fresh_clone(tmp_path):
    commands = planned("test", tmp_path)

    assert commands.index("-m venv .venv") < commands.index(UV) < commands.index("-e '.[test]'") < commands.index("-m pytest")
    assert commands.count("uv pip install") == 1 and "[dev]" not in commands  # the test extras hold the dev ones


def test_make_test_after_make_run_adds_only_the_test_extras(tmp_path):
    commands = planned("test", tmp_path, installed=(".installed",))

    assert "-m venv" not in commands and "[dev]" not in commands
    assert f"{INSTALL} -e './client[async]' -e '.[test]'" in commands


def test_a_virtualenv_made_before_uv_gets_it_before_its_next_install(tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()  # no uv, and no stamp: setup.cfg changed since

    commands = planned("test", tmp_path)

    assert "-m venv" not in commands
    assert commands.index(UV) < commands.index(INSTALL)


def test_make_run_ha_installs_patroni_in_its_own_virtualenv_then_starts_the_topology(tmp_path):
    commands = planned("run-ha", tmp_path, installed=(".installed",))

    # A virtualenv the postgres user can execute (Patroni runs as that user), apart from .venv.
    assert "-m venv .venv-ha" in commands
    assert ".venv-ha/bin/python -m pip install --quiet 'patroni[etcd3]'" in commands
    assert "[dev]" not in commands and "[test]" not in commands
    assert commands.rstrip().endswith(".venv/bin/python -m tooling.ha")


@pytest.mark.parametrize("target", ["test", "test-scale", "run-ha"])
def test_the_debian_packages_come_first_from_the_one_list(target, tmp_path):
    commands = planned(target, tmp_path).splitlines()

    assert commands[0] == f"python3 -m tooling.packages {target}"


def test_ci_runs_exactly_the_readmes_test_commands_and_stops_at_a_failure():
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]

    assert commands == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test", "make test-scale"]


def test_the_test_extras_hold_every_dev_extra_so_make_test_needs_one_install():
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    extras = setup["options.extras_require"]

    def requirements(name: str) -> set[str]:
        return {line.strip() for line in extras[name].splitlines() if line.strip() and not line.strip().startswith("#")}

    assert requirements("dev") <= requirements("test")
