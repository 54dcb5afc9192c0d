"""Ports for the services tests start: each pytest-xdist worker draws from a share of its own, so
two workers never hand out one port in the seconds before its server binds it."""
from __future__ import annotations

from tooling.testing import PORTS, free_port, own_ports


def test_the_workers_of_a_run_draw_from_disjoint_shares_of_the_range():
    shares = [set(own_ports({"PYTEST_XDIST_WORKER": f"gw{n}", "PYTEST_XDIST_WORKER_COUNT": "4"})) for n in range(4)]

    assert all(share <= set(PORTS) and len(share) == len(PORTS) // 4 for share in shares)
    assert all(not first & second for i, first in enumerate(shares) for second in shares[i + 1:])
    assert own_ports({}) == PORTS  # outside xdist: the whole range


def test_a_worker_is_handed_ports_of_its_own_share_only(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")

    share = own_ports()
    assert {free_port() for _ in range(50)} <= set(share)
