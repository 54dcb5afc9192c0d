"""A process's wall clock set off by the test, and moved while it runs (Debian's libfaketime).

``FakeClock(path).env`` is what a process needs in its environment to read its
time through libfaketime; :meth:`FakeClock.set` moves that clock at once, for
every process started with it, however many workers they forked. The offset
lives in a file libfaketime reads on every call (``FAKETIME_NO_CACHE``), so a
change lands between two requests, or in the middle of one.

libfaketime moves the process's monotonic clock with its wall clock: left
alone (``FAKETIME_DONT_FAKE_MONOTONIC``), its 0.9.10 refuses Python's
``time.sleep`` (EINVAL from ``clock_nanosleep``), which gunicorn's master
calls. So a faked clock steps unlike a real one (which leaves the monotonic
clock alone): a service sees the step by its monotonic clock's (``CLOCK_CHECK_SECONDS``
passed, or it went back), and gunicorn's master, seeing its monotonic clock
leap forward, would take every worker for stuck and kill it with its requests
in flight. A real step does neither, so a faked process runs with the
heartbeat timeout off (``WORKER_TIMEOUT_SECONDS=0``).
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

from tooling.packages import package_of

LIBRARY = "/usr/lib/*/faketime/libfaketime.so.1"


def library() -> str:
    """The preload library of Debian's ``faketime`` package.

    :raise RuntimeError: it is not installed (``make test`` installs it: tooling/packages.py).
    """
    found = sorted(glob.glob(LIBRARY))
    if not found:
        raise RuntimeError(f"libfaketime is missing: apt-get install {package_of('faketime')}")
    return found[0]


class FakeClock:
    """One offset, in a file of its own, for the processes started with :attr:`env`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.set(0)

    @property
    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": library(), "FAKETIME_TIMESTAMP_FILE": str(self.path), "FAKETIME_NO_CACHE": "1",
            "WORKER_TIMEOUT_SECONDS": "0",
        }

    def set(self, seconds: int) -> None:
        """Put the clock ``seconds`` ahead of the real one (behind when negative), from now on."""
        staged = self.path.with_name(self.path.name + ".new")
        staged.write_text(f"{int(seconds):+d}\n")
        os.replace(staged, self.path)  # never half-written: an empty file would read as no offset
        self.offset = int(seconds)
