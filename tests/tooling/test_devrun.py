"""`make run` as a new user runs it, in a copy of the project folder, and the
README's walkthrough from a second terminal.

The pair uses the test run's PostgreSQL (two fresh databases, given in the
environment as the README allows) and free ports (PLATFORM_PORT, ...), so it
never meets another checkout's `make run` on 8000-8002.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tooling.testing import free_port, fresh_database, wait_for

ROOT = Path(__file__).resolve().parents[2]
# What a user's shell has; none of the project's settings.
SETTINGS = ("PLATFORM_DATABASE_URL", "CLUSTER_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN")
MAKE_VARIABLES = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR")


@dataclass
class DevRun:
    folder: Path
    process: subprocess.Popen
    log: Path
    ports: dict[str, int]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def shell(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``script`` in bash, in the project folder, as from a second terminal (a clean environment)."""
        environ = {k: v for k, v in os.environ.items() if k not in SETTINGS and not k.endswith("_PORT")}
        return subprocess.run(
            ["bash", "-c", script], cwd=self.folder, env=environ, capture_output=True, text=True, timeout=timeout
        )

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C: SIGINT to the whole foreground process group, as a terminal sends it; `make`'s exit status."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout)


def project_copy(tmp_path: Path) -> Path:
    """The files `make run` reads, and the checkout's .venv (up to date: copies keep their times)."""
    folder = tmp_path / "project"
    folder.mkdir()
    for name in ("Makefile", "Procfile", "setup.cfg", "pyproject.toml", "README.md", "client/pyproject.toml"):
        (folder / name).parent.mkdir(exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    (folder / ".venv").symlink_to(ROOT / ".venv")
    return folder


@contextmanager
def make_run(pg_server_url: str, tmp_path: Path, argv: tuple[str, ...] = ("make", "run")) -> Iterator[DevRun]:
    """`make run` (or ``argv``) until its services answer; stopped (SIGTERM to its group) if the block left it running."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed (Debian's make package)", pytrace=False)
    folder = project_copy(tmp_path)
    ports = {"PLATFORM_PORT": free_port(), "CLUSTER_PORT": free_port(), "RECONCILER_METRICS_PORT": free_port()}
    # As from a terminal, also when these tests run under `make test` (no sub-make).
    environ = {k: v for k, v in os.environ.items() if k not in SETTINGS and k not in MAKE_VARIABLES}
    environ.update({name: str(port) for name, port in ports.items()})
    environ["CLUSTER_DATABASE_URL"] = fresh_database(pg_server_url, "devrun_cluster")  # migrated by make run
    environ["PLATFORM_DATABASE_URL"] = fresh_database(pg_server_url, "devrun_platform")
    log = tmp_path / "make-run.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            list(argv), cwd=folder, env=environ, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    run = DevRun(folder, process, log, ports)
    try:
        for port in (ports["CLUSTER_PORT"], ports["PLATFORM_PORT"]):

            def healthy(port: int = port) -> bool:
                assert process.poll() is None, run.output()
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200

            wait_for(healthy, timeout=120, what=f"make run serving on {port}", poll=0.1,
                     ignoring=(requests.RequestException,))
        yield run
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


def readme_cli_commands() -> list[str]:
    """Every `.venv/bin/platform-svc ...` line of the README's shell blocks, in order, without its comment."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    return [
        line.split("#", 1)[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.startswith(".venv/bin/platform-svc")
    ]


def readme_python_session(ports: dict[str, int]) -> str:
    """The README's Python session ("Calling the pair from Python"), on ``ports`` instead of 8000 and 8001."""
    [session] = re.findall(r"```pycon\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    return session.replace("localhost:8000", f"127.0.0.1:{ports['PLATFORM_PORT']}").replace(
        "localhost:8001", f"127.0.0.1:{ports['CLUSTER_PORT']}"
    )


def test_the_readme_walkthrough_commands_work_after_sourcing_what_make_run_wrote(pg_server_url, tmp_path):
    commands = readme_cli_commands()
    assert {command.split()[1] for command in commands} >= {"create-account", "sync-status", "repair", "reconcile"}

    with make_run(pg_server_url, tmp_path) as run:
        env_file = run.folder / ".dev" / "env"
        for secret in (env_file, run.folder / ".dev" / "internal_token"):
            assert oct(secret.stat().st_mode & 0o777) == oct(0o600), secret  # they hold the token
        printed = run.output()
        shells = {name: run.shell(f"echo 'SELECT count(*) FROM clusters' | make -s psql-{name}")
                  for name in ("platform", "cluster")}
        for command in commands:
            result = run.shell(f". .dev/env && {command}")
            assert result.returncode == 0, (command, result.stdout, result.stderr)
        internal = run.shell(
            '. .dev/env && curl -sf -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $INTERNAL_TOKEN"'
            f' http://127.0.0.1:{run.ports["CLUSTER_PORT"]}/v1/clusters'
        )
        # The Python session, as a doctest: its answers are the ones the README shows.
        (run.folder / "session.txt").write_text(readme_python_session(run.ports))
        python = run.shell(
            ". .dev/env && export API_KEY=$(.venv/bin/platform-svc create-account python-session --json"
            " | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)[\"api_key\"])')"
            " && .venv/bin/python -m doctest session.txt"
        )
        assert python.returncode == 0, python.stdout + python.stderr

    assert (internal.returncode, internal.stdout) == (0, "200"), internal.stderr
    for name, shell in shells.items():  # a psql shell on each database, as docs/operations.md says
        assert shell.returncode == 0 and "count" in shell.stdout, (name, shell.stdout, shell.stderr)
    assert ". .dev/env" in printed
    for name in SETTINGS:  # printed too, for whoever prefers to paste them
        assert f"export {name}=" in printed
    assert f"http://127.0.0.1:{run.ports['PLATFORM_PORT']}" in printed


def test_ctrl_c_stops_everything_quietly(pg_server_url, tmp_path):
    """`make run`'s own recipe (devrun) exits 0, so make reports no error ("make: ***" below). make
    itself then re-raises the SIGINT it got from the terminal (GNU make always does: the shell's $?
    is 130, and it prints nothing)."""
    with make_run(pg_server_url, tmp_path) as run:
        status = run.interrupt()
        output = run.output()

    assert status in (0, -signal.SIGINT), output[-3000:]
    stop = output[output.index("Ctrl-C stops everything."):]
    for noise in ("Error", "rc=", "SIGINT received", "sending SIGTERM", "Traceback", "make: ***"):
        assert noise not in stop, stop[-3000:]
    assert "Shutting down: Master" in stop  # the services did stop, as they do on SIGTERM
    for port in (run.ports["PLATFORM_PORT"], run.ports["CLUSTER_PORT"]):
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_a_process_that_stops_by_itself_is_still_reported_and_make_fails(pg_server_url, tmp_path):
    with make_run(pg_server_url, tmp_path) as run:
        master = int((run.folder / ".dev" / "cluster_svc.pid").read_text())
        os.kill(master, signal.SIGKILL)  # a crash, not a stop anyone asked for
        status = run.process.wait(timeout=60)
        output = run.output()

    assert status != 0
    assert "cluster.1 stopped (rc=" in output
    assert "make: ***" in output
