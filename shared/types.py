"""Column types both services may use, and the SQL type of each declared :class:`~shared.declaration.Column`."""
from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import Integer, String
from sqlalchemy.dialects.postgresql import CIDR
from sqlalchemy.types import TypeDecorator, TypeEngine

from shared.declaration import CIDR as CIDR_COLUMN
from shared.declaration import INTEGER as INTEGER_COLUMN
from shared.declaration import Column, varchar

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


def column_type(column: Column) -> TypeEngine:
    """The SQLAlchemy type that stores a declared column."""
    if column.type == "varchar":
        return String(column.length)
    return Integer() if column.type == "integer" else IPNetworkType()


def declared_as(sql_type: TypeEngine) -> Column | None:
    """The declared column a table's column type is, or None when no declared column is of that type."""
    if isinstance(sql_type, IPNetworkType):
        return CIDR_COLUMN
    if type(sql_type) is String and sql_type.length is not None:
        return varchar(sql_type.length)
    if type(sql_type) is Integer:
        return INTEGER_COLUMN
    return None
