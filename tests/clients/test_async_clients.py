"""Every black-box test of tests/clients/test_clients.py, against the asyncio twins
(idempotent_pair_client.aio), driven through tests.helpers.Synced: a module of its own, so that
pytest-xdist runs it beside the sync one."""
from __future__ import annotations

import pytest

from tests.clients.test_clients import *  # noqa: F403 (every test, and the fixtures they use)


@pytest.fixture
def flavour() -> str:
    return "async"
