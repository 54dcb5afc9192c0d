"""The request's source behind a trusted proxy (shared.source): the client it names, and never a
header a client wrote itself. Through run-ha's HAProxy: tests/scale/test_trusted_proxy.py."""
from __future__ import annotations

import ipaddress

import pytest

from shared.config import ConfigError
from shared.source import TrustedProxies, client_address, forwarded_chain, trusted_proxies

PROXIES = (ipaddress.ip_network("127.0.0.2/32"), ipaddress.ip_network("10.1.0.0/16"))


@pytest.mark.parametrize(
    ("peer", "chain", "client"),
    [
        ("192.0.2.7", ["198.51.100.1"], "192.0.2.7"),  # a client naming someone else: not believed
        ("127.0.0.2", ["198.51.100.1"], "198.51.100.1"),  # the proxy's word
        ("127.0.0.2", ["6.6.6.6", "198.51.100.1"], "198.51.100.1"),  # what the client wrote before it: ignored
        ("127.0.0.2", ["198.51.100.1", "10.1.2.3"], "198.51.100.1"),  # two proxies in a row
        ("127.0.0.2", [], "127.0.0.2"),  # the proxy's own request (its health check)
        ("127.0.0.2", ["not-an-address", "198.51.100.1"], "198.51.100.1"),
        ("127.0.0.2", ["198.51.100.1", "garbage"], "127.0.0.2"),  # nothing believable after the proxy
        ("127.0.0.2", ["2001:db8::1"], "2001:db8::1"),
    ],
)
def test_the_client_is_the_rightmost_address_a_trusted_proxy_names(peer, chain, client):
    assert client_address(peer, chain, PROXIES) == client


def test_the_forwarded_header_is_read_before_x_forwarded_for():
    environ = {"HTTP_FORWARDED": 'for=192.0.2.60;proto=http, for="[2001:db8::7]"', "HTTP_X_FORWARDED_FOR": "6.6.6.6"}
    assert forwarded_chain(environ) == ["192.0.2.60", "2001:db8::7"]
    assert forwarded_chain({"HTTP_X_FORWARDED_FOR": " 192.0.2.1 ,192.0.2.2"}) == ["192.0.2.1", "192.0.2.2"]


def test_no_proxy_is_trusted_unless_configured_and_a_bad_entry_stops_start_up():
    assert trusted_proxies({}) == ()
    assert trusted_proxies({"TRUSTED_PROXIES": "127.0.0.2, 10.0.0.0/8"}) == (
        ipaddress.ip_network("127.0.0.2/32"), ipaddress.ip_network("10.0.0.0/8"),
    )
    with pytest.raises(ConfigError, match="TRUSTED_PROXIES"):
        trusted_proxies({"TRUSTED_PROXIES": "haproxy"})


def test_the_middleware_rewrites_remote_addr_and_keeps_the_proxys():
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        return []

    TrustedProxies(app, PROXIES)({"REMOTE_ADDR": "127.0.0.2", "HTTP_X_FORWARDED_FOR": "198.51.100.9"}, None)
    assert seen["REMOTE_ADDR"] == "198.51.100.9" and seen["PROXY_REMOTE_ADDR"] == "127.0.0.2"
    seen.clear()
    TrustedProxies(app, PROXIES)({"REMOTE_ADDR": "192.0.2.5", "HTTP_X_FORWARDED_FOR": "198.51.100.9"}, None)
    assert seen["REMOTE_ADDR"] == "192.0.2.5" and "PROXY_REMOTE_ADDR" not in seen
