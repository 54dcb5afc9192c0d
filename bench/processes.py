"""The processes ``make bench`` runs and measures: services served as users serve them, commands
run to completion, the CPU each process tree spent (from /proc), freezing and thawing, py-spy."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras

from bench.serve import connect_kwargs
from tooling.testing import LiveServer, console_script

ROOT = Path(__file__).resolve().parent.parent


class Server(LiveServer):
    """A LiveServer whose output goes to a log file instead of the terminal."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        super().__init__(argv, env)
        self.name = name
        self.log = logs / f"{name}.log"

    def start(self, timeout: float = 60.0) -> Server:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self.wait_healthy(timeout)
        except Exception:
            self.stop()
            raise RuntimeError(f"{self.name} did not start; see {self.log}:\n{self.log.read_text()[-2000:]}") from None
        return self


def run_checked(argv: list[str], env: dict[str, str], what: str) -> str:
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


@contextmanager
def pg_cursor(url: str) -> Iterator[Any]:
    """An autocommit cursor (so VACUUM works); the connection is closed afterwards."""
    conn = psycopg2.connect(**connect_kwargs(url))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def sql(url: str, statement: str, params: Any = None) -> list[tuple]:
    with pg_cursor(url) as cur:
        cur.execute(statement, params)
        return cur.fetchall() if cur.description else []


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds used so far) for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return table


def tree_cpu(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each named process tree (root and descendants alive now), and of the machine."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    result = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += table.get(pid, (0, 0.0))[1]
            todo.extend(children.get(pid, []))
        result[name] = total
    child = os.times()  # our finished children: wrk during a load run, the reconciler during a drain
    result["children"] = child.children_user + child.children_system
    with open("/proc/stat") as handle:
        ticks = [int(v) for v in handle.readline().split()[1:]]
    result["machine busy"] = (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS  # all but idle and iowait
    return result


def postmaster_pid(server_url: str) -> int | None:
    """The PostgreSQL server's PID when it runs on this machine (embedded), else None."""
    try:
        data_dir = sql(server_url, "SHOW data_directory")[0][0]
        return int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError, psycopg2.Error):
        return None


def freeze(server: Server) -> None:
    os.killpg(server.process.pid, signal.SIGSTOP)


def thaw(server: Server) -> None:
    os.killpg(server.process.pid, signal.SIGCONT)


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def profile_reconciler(env: dict[str, str], concurrency: int, out_dir: Path) -> Path:
    """py-spy record (GIL holder) of one ``platform-svc reconcile --once`` run."""
    out = out_dir / "reconciler.gil.txt"
    subprocess.run(
        [py_spy(), "record", "-f", "raw", "-r", "200", "--gil", "--nonblocking", "-o", str(out), "--",
         console_script("platform-svc"), "reconcile", "--once", "--concurrency", str(concurrency)],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
    )
    return out
