"""What schemathesis needs to know of these APIs beyond their documents, for the suite and for the
CLI alike (``SCHEMATHESIS_HOOKS=tooling.fuzzing schemathesis run ...``; the rest of what it is
told is ``schemathesis.toml``):

- the values of the documents' ``format: cidr`` (a network: the pattern says the syntax, the
  format that no host bit is set, which no portable regular expression can);
- a generated Idempotency-Key made unique to its request: the fuzzer draws keys from a small
  space and sends two bodies with one key, whose answer (422 ``idempotency_key_reused``) is the
  contract's, not a valid request refused.
"""
from __future__ import annotations

import ipaddress
import uuid
from collections.abc import MutableMapping
from typing import Any

import schemathesis
from hypothesis import strategies as st


def networks() -> st.SearchStrategy[str]:
    """Valid values of the documents' ``format: cidr``: a network, host bits zero."""
    address = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6))
    return address.flatmap(
        lambda a: st.integers(0, a.max_prefixlen).map(lambda p: str(ipaddress.ip_network(f"{a}/{p}", strict=False)))
    )


def unique_key(headers: MutableMapping[str, Any] | None) -> MutableMapping[str, Any] | None:
    """``headers`` with their Idempotency-Key, if a valid one, made unique to this request (a
    suffix keeps it as valid, or invalid, as it was generated)."""
    key = (headers or {}).get("Idempotency-Key")
    if headers is not None and isinstance(key, str) and key.strip() and key.isascii() and key.isprintable() \
            and len(key) <= 255:
        headers["Idempotency-Key"] = f"{key[:200]}-{uuid.uuid4().hex}"
    return headers


schemathesis.openapi.format("cidr", networks())


@schemathesis.hook
def map_headers(context: Any, headers: MutableMapping[str, Any] | None) -> MutableMapping[str, Any] | None:
    return unique_key(headers)
