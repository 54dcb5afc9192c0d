"""The clients a program uses (platform_svc.client, cluster_svc.client) against a scripted
HTTP server (tooling.scripted), and against nothing at all."""
from __future__ import annotations


import pytest

from tooling.scripted import ScriptedServer


@pytest.fixture
def server():
    scripted = ScriptedServer().start()
    try:
        yield scripted
    finally:
        scripted.stop()

