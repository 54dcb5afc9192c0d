"""Fixtures every test package shares: one real PostgreSQL per test run."""
from __future__ import annotations

import pytest

from tooling.testing import postgres_server


@pytest.fixture(scope="session")
def pg_server_url():
    """A PostgreSQL server (embedded, or TEST_DATABASE_URL) for the whole run."""
    with postgres_server() as url:
        yield url
