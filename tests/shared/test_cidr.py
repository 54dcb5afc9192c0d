"""The published pattern of a network in CIDR notation (shared.schemas.CIDR_SYNTAX) is exact: every
string it admits is a network ipaddress reads, and every network ipaddress writes it admits; so a
caller's tooling generating from the OpenAPI document sends only what the service accepts (but for
host bits, which the description names). schemathesis found "00" passing the old pattern."""
from __future__ import annotations

import ipaddress
import re

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.schemas import CIDR_SYNTAX, IPNetwork

PATTERN = re.compile(CIDR_SYNTAX)
ECMA = jsonschema_rs.validator_for({"type": "string", "pattern": CIDR_SYNTAX})


@settings(max_examples=300, deadline=None)
@given(st.from_regex(CIDR_SYNTAX, fullmatch=True))
def test_whatever_the_pattern_admits_is_a_network(text):
    ipaddress.ip_network(text, strict=False)  # raises for anything that is not
    assert ECMA.is_valid(text)  # and ECMA-262's reading of the pattern agrees


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)), st.integers(min_value=0, max_value=128))
def test_every_network_as_ipaddress_writes_it_is_admitted(address, prefix):
    network = ipaddress.ip_network(f"{address}/{min(prefix, address.max_prefixlen)}", strict=False)
    for text in (str(network), network.exploded):
        assert PATTERN.fullmatch(text) and ECMA.is_valid(text), text


@pytest.mark.parametrize("text", ["::ffff:10.0.0.0/104", "::1.2.3.0/120", "64:ff9b::1.2.3.4", "1:2:3:4:5:6:1.2.3.4",
                                  "1:2:3:4:5::1.2.3.4", "a::b:1.2.3.4/128"])
def test_an_ipv6_address_may_end_in_an_ipv4_one_as_postgresql_writes_it(text):
    assert PATTERN.fullmatch(text) and ECMA.is_valid(text)
    ipaddress.ip_network(text, strict=False)


@pytest.mark.parametrize("text", ["00", "10.0.0.0/33", "256.1.1.1", "01.2.3.4", "1.2.3.4/08", "1:2:3:4:5:6:7:8:9",
                                  "2001:db8::/129", "fe80::1%eth0", "10.0.0.0/255.0.0.0", ":::"])
def test_what_is_no_network_is_refused_by_the_pattern_itself(text):
    assert not PATTERN.fullmatch(text) and not ECMA.is_valid(text)
    with pytest.raises(Exception, match="Not a valid"):
        IPNetwork().deserialize(text)
