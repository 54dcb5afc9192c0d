"""The console scripts as a user runs them, without paying for a new interpreter each time.

Starting ``platform-svc`` costs about half a second of CPU before the command does
anything (importing Flask, SQLAlchemy, marshmallow, ...), two seconds of wall time on a
busy machine. A test that runs the operator's commands after almost every step (the
model of tests/chaos/test_model.py runs hundreds) cannot pay that each time.

:class:`Commands` keeps one process with the commands' modules imported
(multiprocessing's *forkserver*, preloaded) and runs each command in a child forked
from it: a process of its own, with its own arguments, environment, stdout, stderr,
exit status, database pools and signal handlers, started in a few milliseconds. The
child calls the console script's own entry point (:mod:`shared.entrypoints`), so what
runs is exactly what the installed command runs after its imports.
"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# What every command imports before it starts: preloaded once in the fork server.
PRELOAD = ["shared.entrypoints", "platform_svc.cli", "cluster_svc.cli"]


class Commands:
    """``platform-svc`` and ``cluster-svc`` commands run in children of one preloaded fork server."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)

    def run(
        self, program: str, *args: str, env: dict[str, str], timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run ``program ARGS`` (``platform-svc`` or ``cluster-svc``) with exactly ``env`` as its
        environment, to completion: its exit status and what it printed, as :func:`subprocess.run` gives them.

        :raise subprocess.TimeoutExpired: it ran longer than ``timeout`` (it is killed).
        """
        with tempfile.TemporaryDirectory(dir=self.workdir) as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            child = self._context.Process(target=_command, args=(program, list(args), env, str(out), str(err)))
            child.start()
            child.join(timeout)
            if child.exitcode is None:
                child.kill()
                child.join()
                raise subprocess.TimeoutExpired([program, *args], timeout)
            exitcode = child.exitcode
            child.close()
            return subprocess.CompletedProcess(
                [program, *args], exitcode, out.read_text(errors="replace"), err.read_text(errors="replace")
            )


def _command(program: str, args: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked child: the console script's entry point, as if started with ``args``."""
    from shared import entrypoints

    os.environ.clear()
    os.environ.update(env)
    # The descriptors themselves, so that logging handlers and anything else writing to fd 1 or 2
    # (not only sys.stdout) land in the files.
    for fd, path in ((1, out), (2, err)):
        with open(path, "wb") as file:
            os.dup2(file.fileno(), fd)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (the process's own streams)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.argv = [program, *args]
    entry = {"platform-svc": entrypoints.platform_svc, "cluster-svc": entrypoints.cluster_svc}[program]
    entry()  # exits through SystemExit, which multiprocessing turns into the exit code
