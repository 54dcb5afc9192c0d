"""Long-running processes kept alive by supervisord (the ``supervisor`` package), as a deployment
keeps them: ``make run-ha``'s every process is one of its programs.

:class:`Supervisor` writes one ``supervisord.conf`` for its :class:`Program` s and runs
supervisord in the foreground, as a child of ours in a session of its own. The programs
are declared with ``autostart=false``: the caller starts each in the order its
dependencies need (:meth:`Supervisor.start`), waiting for it to be ready as it sees fit.
From then on supervisord restarts whichever dies, whatever killed it (``autorestart``):
at once when it had run for ``startsecs``, else after a back-off that grows by a second
per failed start. The topology stops only when :meth:`Supervisor.stop` (Ctrl-C) shuts
supervisord down, which stops the programs in the reverse of their ``priority``.

``supervisorctl -c WORKDIR/supervisord.conf status`` shows every program's state, pid
and uptime (:meth:`Supervisor.status_command`); the file itself is what a deployment
would copy, with its own paths.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import xmlrpc.client
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.xmlrpc import SupervisorTransport

from tooling import testing

START_SECONDS = 1  # running this long counts as started; a quicker exit is a failed start
START_RETRIES = 100  # failed starts in a row (each waited for a second longer) before it gives up


@dataclass
class Program:
    """One supervised program. ``priority``: lower starts first and stops last;
    ``stop_signal`` and ``stop_wait``: how supervisord stops it (SIGKILL after the wait)."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None  # honoured only when supervisord runs as root
    cwd: Path | None = None
    priority: int = 500
    stop_signal: str = "TERM"
    stop_wait: int = 30

    def section(self) -> str:
        settings = {
            "command": " ".join(_quoted(arg) for arg in self.argv),
            "priority": self.priority,
            "autostart": "false",
            "autorestart": "true",
            "startsecs": START_SECONDS,
            "startretries": START_RETRIES,
            "stopsignal": self.stop_signal,
            "stopwaitsecs": self.stop_wait,
            # The whole process group: gunicorn's workers, Patroni's PostgreSQL.
            "stopasgroup": "true",
            "killasgroup": "true",
            "redirect_stderr": "true",
            "stdout_logfile": _escaped(str(self.log)),
            "stdout_logfile_maxbytes": "50MB",
            "stdout_logfile_backups": 2,
        }
        if self.env:
            settings["environment"] = ",".join(f'{key}="{_escaped(value)}"' for key, value in self.env.items())
        if self.user is not None and os.geteuid() == 0:
            settings["user"] = self.user
        if self.cwd is not None:
            settings["directory"] = _escaped(str(self.cwd))
        return f"[program:{self.name}]\n" + "".join(f"{key}={value}\n" for key, value in settings.items())


def _escaped(value: str) -> str:
    """A value as supervisord reads it: it expands ``%(name)s``, so a ``%`` is written ``%%``."""
    if '"' in value or "\n" in value:
        raise ValueError(f"supervisord cannot pass a value with a quote or a newline: {value!r}")
    return value.replace("%", "%%")


def _quoted(arg: str) -> str:
    """One argument of ``command`` (supervisord splits it as a shell would, without running one)."""
    import shlex

    return _escaped(shlex.quote(arg))


class Supervisor:
    """supervisord for ``programs``, its configuration, socket and log in ``workdir``."""

    def __init__(self, workdir: Path, programs: list[Program]) -> None:
        self.workdir = workdir
        self.programs = {program.name: program for program in programs}
        self.config = workdir / "supervisord.conf"
        self.socket = workdir / "supervisor.sock"
        self.process: subprocess.Popen[bytes] | None = None

    def config_text(self) -> str:
        head = f"""\
[supervisord]
nodaemon=true
logfile={_escaped(str(self.workdir / "supervisord.log"))}
pidfile={_escaped(str(self.workdir / "supervisord.pid"))}
childlogdir={_escaped(str(self.workdir))}

[unix_http_server]
file={_escaped(str(self.socket))}
chmod=0700

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{_escaped(str(self.socket))}

"""
        return head + "\n".join(program.section() for program in self.programs.values())

    def run(self) -> Supervisor:
        """Write the configuration and start supervisord (no program yet); once it answers."""
        self.config.write_text(self.config_text())
        supervisord = Path(sys.executable).with_name("supervisord")
        with (self.workdir / "supervisord.out").open("ab") as out:
            self.process = subprocess.Popen([str(supervisord), "-c", str(self.config)], stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        testing.wait_for(lambda: self._call("getState")["statename"] == "RUNNING", timeout=30,
                         what="supervisord", ignoring=(OSError, xmlrpc.client.Fault))
        return self

    def status_command(self) -> str:
        return f"{Path(sys.executable).with_name('supervisorctl')} -c {self.config} status"

    def _call(self, method: str, *args: object) -> Any:
        """One call of supervisord's XML-RPC interface (``supervisor.METHOD``), on a connection of its own."""
        transport = SupervisorTransport(None, None, f"unix://{self.socket}")
        with xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport) as proxy:
            return getattr(proxy.supervisor, method)(*args)

    # -- programs ------------------------------------------------------------------

    def start(self, name: str) -> None:
        """Start ``name`` (supervisord keeps it running from now on); at once, not waiting for it."""
        self._call("startProcess", name, False)

    def info(self, name: str) -> dict:
        return self._call("getProcessInfo", name)

    def pid(self, name: str) -> int | None:
        """The program's pid while it runs (its process group's too), else None."""
        info = self.info(name)
        return info["pid"] if info["statename"] in ("STARTING", "RUNNING") and info["pid"] else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 120) -> None:
        """supervisord stops every program (newest-priority first) and exits; safe to call twice."""
        if not self.alive():
            return
        try:
            self._call("shutdown")
        except (OSError, xmlrpc.client.Fault):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Supervised:
    """A handle on one running program: its pid now, and a way to kill it as a crash would."""

    def __init__(self, supervisor: Supervisor, name: str) -> None:
        self.supervisor, self.name = supervisor, name

    @property
    def pid(self) -> int | None:
        return self.supervisor.pid(self.name)

    def kill(self, sig: int = signal.SIGKILL) -> int:
        """``sig`` to the program's whole process group, as a crash or the OOM killer would end it;
        returns the pid it had (supervisord starts it again)."""
        pid = self.pid
        if pid is None:
            raise RuntimeError(f"{self.name} is not running")
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        return pid

    def wait_restarted(self, old_pid: int, timeout: float = 30) -> int:
        """The pid of the process supervisord started in place of ``old_pid``."""
        return testing.wait_for(lambda: (pid := self.pid) not in (None, old_pid) and pid, timeout=timeout,
                                what=f"{self.name} restarted")
