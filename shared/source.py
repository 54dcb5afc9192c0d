"""Who sent a request: the TCP peer, or the client a trusted proxy names (``TRUSTED_PROXIES``).

Behind a balancer every request comes from the balancer, so whatever is counted per source (the
console's login throttle) would count everyone as one. A proxy says whom it forwards for in
``X-Forwarded-For`` (or RFC 7239's ``Forwarded: for=``), but so can any client: the header is
believed only from a peer in ``TRUSTED_PROXIES`` (addresses or networks, comma-separated; none by
default, so nothing is believed). Each trusted proxy appends the address it received from, so the
client is the rightmost address that is not itself a trusted proxy; what stands left of it was
written by the client and is ignored.

:class:`TrustedProxies` rewrites ``REMOTE_ADDR`` before the app sees it, so every reader of
``request.remote_addr`` (the throttle, the logs) sees the client; the proxy's own address stays
in the environ, under :data:`PROXY_ADDR`.
"""
from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shared.config import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
PROXY_ADDR = "PROXY_REMOTE_ADDR"
_FORWARDED_FOR = re.compile(r'(?:^|[;,\s])for="?\[?([^\]";,\s]+)', re.IGNORECASE)


def trusted_proxies(environ: Mapping[str, str] | None = None) -> tuple[Network, ...]:
    """``TRUSTED_PROXIES``: the networks whose ``X-Forwarded-For`` is believed (none when unset).

    :raise ConfigError: an entry that is neither an address nor a network.
    """
    raw = (os.environ if environ is None else environ).get("TRUSTED_PROXIES", "")
    networks = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConfigError(f"TRUSTED_PROXIES holds {entry!r}, neither an address nor a network") from None
    return tuple(networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def forwarded_chain(environ: Mapping[str, Any]) -> list[str]:
    """The addresses the proxies say they received from, oldest first (``Forwarded`` when sent,
    else ``X-Forwarded-For``)."""
    forwarded = environ.get("HTTP_FORWARDED")
    if forwarded:
        return _FORWARDED_FOR.findall(forwarded)
    return [part.strip() for part in environ.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]


def client_address(peer: str, chain: Iterable[str], proxies: tuple[Network, ...]) -> str:
    """The client: ``peer`` unless it is a trusted proxy, else the rightmost address of ``chain``
    that is not one (an entry that is no address ends the walk: what is left of it is the client's
    own writing)."""
    def trusted(text: str) -> bool:
        address = _address(text)
        return address is not None and any(address in network for network in proxies)

    if not trusted(peer):
        return peer
    client = peer
    for hop in reversed(list(chain)):
        if _address(hop) is None:
            break
        client = hop
        if not trusted(hop):
            break
    return client


class TrustedProxies:
    """WSGI middleware: ``REMOTE_ADDR`` is the client a trusted proxy names (see the module)."""

    def __init__(self, app: Callable[..., Any], proxies: tuple[Network, ...]) -> None:
        self.app, self.proxies = app, proxies

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        peer = environ.get("REMOTE_ADDR") or ""
        if self.proxies:
            client = client_address(peer, forwarded_chain(environ), self.proxies)
            if client != peer:
                environ[PROXY_ADDR], environ["REMOTE_ADDR"] = peer, client
        return self.app(environ, start_response)
