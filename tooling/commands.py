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
        return self.start(program, *args, env=env).wait(timeout)

    def start(self, program: str, *args: str, env: dict[str, str]) -> Started:
        """Start ``program ARGS`` and return at once (:meth:`Started.wait` for its end)."""
        folder = tempfile.TemporaryDirectory(dir=self.workdir)
        out, err = Path(folder.name, "stdout"), Path(folder.name, "stderr")
        child = self._context.Process(target=_command, args=(program, list(args), env, str(out), str(err)))
        child.start()
        return Started([program, *args], child, folder)


class Started:
    """A command started by :meth:`Commands.start`, running until :meth:`wait` returns."""

    def __init__(self, argv: list[str], child: multiprocessing.process.BaseProcess,
                 folder: tempfile.TemporaryDirectory) -> None:
        self.argv, self.child, self._folder = argv, child, folder

    @property
    def pid(self) -> int | None:
        return self.child.pid

    def poll(self) -> int | None:
        """Its exit status, or None while it runs (as :meth:`subprocess.Popen.poll`)."""
        return self.child.exitcode

    def wait(self, timeout: float = 120) -> subprocess.CompletedProcess:
        """Its exit status and what it printed, once it has ended.

        :raise subprocess.TimeoutExpired: it ran longer than ``timeout`` (it is killed).
        """
        try:
            self.child.join(timeout)
            if self.child.exitcode is None:
                self.child.kill()
                self.child.join()
                raise subprocess.TimeoutExpired(self.argv, timeout)
            exitcode = self.child.exitcode
            self.child.close()
            folder = Path(self._folder.name)
            return subprocess.CompletedProcess(self.argv, exitcode, (folder / "stdout").read_text(errors="replace"),
                                               (folder / "stderr").read_text(errors="replace"))
        finally:
            self._folder.cleanup()


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
