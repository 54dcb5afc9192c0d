"""Fixtures every test package shares: one real PostgreSQL per test run (per
pytest-xdist worker); schemathesis told what the documents' own ``cidr``
format looks like; and the end of every process log of a failed test's pair
(:class:`tooling.pair.Pair`) in its report."""
from __future__ import annotations

import ipaddress

import pytest
import schemathesis
from hypothesis import strategies as st

from tooling.pair import Pair
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Pair):
                report.sections.append((f"process logs of {name}", value.logs()))
    return report
