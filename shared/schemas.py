"""Base schemas and fields both services build on.

Input schemas reject unknown fields (marshmallow's RAISE), so a typo in a field
name is a 422 naming the field rather than a silently ignored value.
"""
from __future__ import annotations

import ipaddress
import re
import uuid
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate


class InputSchema(ma.Schema):
    class Meta:
        unknown = ma.RAISE


class OutputSchema(ma.Schema):
    class Meta:
        ordered = True


class ObjectId(fields.UUID):
    """A UUID that names an object: canonical text form, never the nil UUID."""

    default_error_messages = {
        "invalid_uuid": "Not a valid UUID.",
        "nil": "The nil UUID cannot name an object.",
    }

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> uuid.UUID | None:
        if not isinstance(value, str):
            raise self.make_error("invalid_uuid")
        result = super()._deserialize(value, attr, data, **kwargs)
        if result is not None and result.int == 0:
            raise self.make_error("nil")
        return result


class StrictInteger(fields.Integer):
    """An integer that refuses strings, floats and booleans (written out as any integer)."""

    dumped_as = fields.Integer

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, **kwargs)

    def _validated(self, value: Any) -> int:
        if isinstance(value, bool):
            raise self.make_error("invalid")
        return super()._validated(value)


class Digits(fields.Integer):
    """An integer in a query: ASCII digits only (``int`` would also read ``１``, a fullwidth one)."""

    default_error_messages = {"digits": "Must be written in the digits 0-9."}

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> int:
        if isinstance(value, str) and not value.isascii():
            raise self.make_error("digits")
        return super()._deserialize(value, attr, data, **kwargs)


class Text(fields.String):
    """A string PostgreSQL can store: no NUL character, no lone surrogate (written out as any string)."""

    dumped_as = fields.String

    default_error_messages = {
        "nul": "Must not contain the NUL character.",
        "unicode": "Must be valid Unicode text (it contains a lone surrogate).",
    }

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in text:
            raise self.make_error("nul")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise self.make_error("unicode") from None
        return text


# What a network in CIDR notation is, exactly (the document publishes it, so a caller's tooling
# generates only what is accepted): an IPv4 address and a prefix up to 32, or an IPv6 address
# (any of its :: compressions, its last 32 bits also as an IPv4 address, as PostgreSQL writes
# ::ffff:10.0.0.0/104; no zone) and a prefix up to 128. Groups that
# capture nothing and counted repeats only: every language's regular expressions read it. A bare
# address is the network of that one host (/32 or /128); :mod:`ipaddress` then checks the host
# bits, which no pattern of a sensible size can.
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX = "[0-9A-Fa-f]{1,4}"
_DOTTED = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_IPV4 = rf"{_DOTTED}(?:/(?:3[0-2]|[12]?[0-9]))?"
_IPV6 = "(?:" + "|".join([
    rf"(?:{_HEX}:){{7}}{_HEX}",
    rf"(?:{_HEX}:){{1,7}}:",
    rf"(?:{_HEX}:){{1,6}}:{_HEX}",
    rf"(?:{_HEX}:){{1,5}}(?::{_HEX}){{1,2}}",
    rf"(?:{_HEX}:){{1,4}}(?::{_HEX}){{1,3}}",
    rf"(?:{_HEX}:){{1,3}}(?::{_HEX}){{1,4}}",
    rf"(?:{_HEX}:){{1,2}}(?::{_HEX}){{1,5}}",
    rf"{_HEX}:(?::{_HEX}){{1,6}}",
    rf":(?:(?::{_HEX}){{1,7}}|:)",
    rf"(?:{_HEX}:){{6}}{_DOTTED}",  # the last 32 bits as an IPv4 address
    rf"::(?:{_HEX}:){{0,5}}{_DOTTED}",
    *(rf"(?:{_HEX}:){{{left}}}(?::{_HEX}){{0,{5 - left}}}:{_DOTTED}" for left in range(1, 6)),
]) + ")(?:/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9]))?"
CIDR_SYNTAX = f"^(?:{_IPV4}|{_IPV6})$"


_CIDR_SYNTAX = re.compile(CIDR_SYNTAX)


class IPNetwork(fields.String):
    """An IPv4 or IPv6 network in CIDR notation (host bits zero), loaded as an
    :mod:`ipaddress` network."""

    def __init__(self, **kwargs: Any) -> None:
        metadata = {
            "format": "cidr",
            "pattern": CIDR_SYNTAX,
            "maxLength": 43,
            "description": "IPv4 or IPv6 network in CIDR notation, host bits zero, e.g. 10.0.0.0/8",
            **kwargs.pop("metadata", {}),
        }
        super().__init__(metadata=metadata, **kwargs)

    default_error_messages = {
        "invalid_network": "Not a valid IPv4 or IPv6 network in CIDR notation (for example 10.0.0.0/8).",
        "host_bits": "Has host bits set; did you mean {network}?",
    }

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else str(value)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        text = super()._deserialize(value, attr, data, **kwargs)
        # Refuses what ipaddress would also read but the document does not allow:
        # a netmask instead of a prefix, an IPv6 zone ("fe80::%eth0").
        if _CIDR_SYNTAX.fullmatch(text) is None:
            raise self.make_error("invalid_network")
        try:
            return ipaddress.ip_network(text, strict=True)
        except ValueError:
            pass
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise self.make_error("invalid_network") from None
        raise self.make_error("host_bits", network=str(network))


class ProblemSchema(OutputSchema):
    """RFC 9457 problem details, as every error is answered (documentation only)."""

    type = fields.String(metadata={"description": "URI naming the kind of problem"})
    title = fields.String()
    status = fields.Integer()
    detail = fields.String(metadata={"description": "What went wrong, for a person"})
    code = fields.String(metadata={"description": "Stable machine-readable code"})
    errors = fields.Dict(metadata={"description": "Per-field validation messages"})
    conflicts = fields.List(fields.Dict(), metadata={"description": "For id_conflict: field, stored and sent values"})


class PageArgs(InputSchema):
    """Keyset pagination: ``after`` is the last id of the previous page."""

    limit = Digits(load_default=50, validate=validate.Range(min=1, max=500))
    after = ObjectId(load_default=None)


def page_schema(item_schema: type[ma.Schema], name: str) -> type[ma.Schema]:
    """An output schema for one page of ``item_schema`` items."""
    return type(
        name,
        (OutputSchema,),
        {
            "items": fields.List(fields.Nested(item_schema)),
            "next_after": fields.UUID(allow_none=True, metadata={"description": "Pass as 'after' for the next page"}),
        },
    )
