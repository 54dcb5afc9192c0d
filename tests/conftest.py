"""Fixtures every test package shares: one real PostgreSQL per test run; and
schemathesis told what the documents' own ``cidr`` format looks like."""
from __future__ import annotations

import ipaddress

import pytest
import schemathesis
from hypothesis import strategies as st

from tooling.testing import postgres_server


def _networks() -> st.SearchStrategy[str]:
    """Valid values of the documents' ``format: cidr``: a network, host bits zero."""
    address = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6))
    return address.flatmap(
        lambda a: st.integers(0, a.max_prefixlen).map(lambda p: str(ipaddress.ip_network(f"{a}/{p}", strict=False)))
    )


schemathesis.openapi.format("cidr", _networks())


@pytest.fixture(scope="session")
def pg_server_url():
    """A PostgreSQL server (embedded, or TEST_DATABASE_URL) for the whole run."""
    with postgres_server() as url:
        yield url
