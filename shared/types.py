"""Column types both services may use."""
from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy.dialects.postgresql import CIDR
from sqlalchemy.types import TypeDecorator

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class IPNetworkType(TypeDecorator):
    """PostgreSQL ``cidr`` read and written as :mod:`ipaddress` networks.

    Comparing objects, not text, matters: PostgreSQL and Python spell some
    networks differently (``::ffff:10.0.0.0/104`` against ``::ffff:a00:0/104``),
    and a replay must not look like a conflict because of spelling.
    """

    impl = CIDR
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else str(ipaddress.ip_network(value))

    def process_result_value(self, value: Any, dialect: Any) -> Network | None:
        return None if value is None else ipaddress.ip_network(value)
