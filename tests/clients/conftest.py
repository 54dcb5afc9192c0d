"""The clients a program uses (platform_svc.client, cluster_svc.client) against a scripted
HTTP server (tooling.scripted), and against nothing at all."""
from __future__ import annotations

import socket

import pytest

from tooling.scripted import ScriptedServer


@pytest.fixture
def server():
    scripted = ScriptedServer().start()
    try:
        yield scripted
    finally:
        scripted.stop()


@pytest.fixture
def closed_port():
    """A port on 127.0.0.1 where nothing listens: bound, never listening, so connects are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def silent_port():
    """A port where the kernel accepts connections but nobody ever reads or answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()
