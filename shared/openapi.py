"""The OpenAPI documents, written for tools other than ours.

Generated clients, validators and fuzzers believe what the document says, so
it says everything the services answer:

- every status an operation can answer. Errors any request can meet (a
  malformed or incomplete request, a missing token, a URI or header too long,
  the database away) and
  those of a body or a path ID (413, 415, 422) are added to every operation
  they apply to by :class:`ContractPlugin`, besides the ``default``;
- every response header: :data:`COMMON_RESPONSE_HEADERS` go on every response
  of every operation, :data:`STATUS_HEADERS` on every response of a status
  (``WWW-Authenticate`` on 401, ``Retry-After`` on 503), and views declare
  their own (``Location``, ``Idempotent-Replayed``) with ``headers=``;
- request schemas that say what the server accepts: a schema's
  ``Meta.json_schema`` adds keywords marshmallow cannot express
  (``minProperties`` on a PATCH body).

Regular expressions are ECMA-262 (``^...$``, no ``\\A``/``\\Z``); the
validators that use them match the whole string (see :class:`FullMatch`).
"""
from __future__ import annotations

from typing import Any

from apispec import BasePlugin
from apispec.ext.marshmallow import MarshmallowPlugin, OpenAPIConverter
from marshmallow import validate

# Response headers ----------------------------------------------------------------

LOCATION = {"description": "The URL of the object", "schema": {"type": "string"}}
IDEMPOTENT_REPLAYED = {
    "description": "'true' when the object already existed and this answer is its current state",
    "schema": {"type": "string", "enum": ["true"]},
}
RETRY_AFTER = {"description": "Seconds to wait before trying again", "schema": {"type": "integer", "minimum": 0}}
WWW_AUTHENTICATE = {"description": "The scheme to authenticate with: Bearer", "schema": {"type": "string"}}

# On the answers of a rate-limited operation (platform_svc's public API): where the
# account stands in its window, in the IETF httpapi draft's fields (RateLimit-Limit,
# -Remaining, -Reset; -Policy says the window).
RATE_LIMIT_HEADERS: dict[str, dict[str, Any]] = {
    "RateLimit-Limit": {
        "description": "Requests the account may make per window (see RateLimit-Policy)",
        "schema": {"type": "integer", "minimum": 1},
    },
    "RateLimit-Remaining": {
        "description": "Requests left in the current window", "schema": {"type": "integer", "minimum": 0},
    },
    "RateLimit-Reset": {
        "description": "Seconds until the current window ends", "schema": {"type": "integer", "minimum": 0},
    },
    "RateLimit-Policy": {
        "description": "The limit and its window in seconds, e.g. '100;w=1'",
        "schema": {"type": "string", "pattern": "^[0-9]+;w=[0-9]+$"},
    },
}
TOO_MANY_REQUESTS = (
    "The account used its requests for this window (too_many_requests): try again after Retry-After seconds."
    " A replay with the same Idempotency-Key does not count again."
)

# On every response of every operation.
COMMON_RESPONSE_HEADERS: dict[str, dict[str, Any]] = {
    "X-Request-ID": {
        "description": "The caller's X-Request-ID if it was 1-128 printable ASCII characters, else a new one.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 128},
    },
}

# On every response with this status, whichever operation answers it.
STATUS_HEADERS: dict[int, dict[str, dict[str, Any]]] = {
    401: {"WWW-Authenticate": WWW_AUTHENTICATE},
    429: {"Retry-After": RETRY_AFTER},
    503: {"Retry-After": RETRY_AFTER},
}


def headers_for(status: int | str) -> dict[str, dict[str, Any]]:
    """The headers every response of ``status`` carries."""
    code = int(status) if str(status).isdigit() else 0
    return {**COMMON_RESPONSE_HEADERS, **STATUS_HEADERS.get(code, {})}


# Errors added to operations ------------------------------------------------------

# Component response names (flask-smorest registers one per HTTP status).
_NAMES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    413: "REQUEST_ENTITY_TOO_LARGE",
    414: "REQUEST_URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "UNPROCESSABLE_ENTITY",
    431: "REQUEST_HEADER_FIELDS_TOO_LARGE",
    503: "SERVICE_UNAVAILABLE",
}
# Malformed HTTP or JSON, or a body shorter than its Content-Length; request line too long;
# a header line too long or too many (gunicorn answers those); database unreachable.
ANY_REQUEST = (400, 414, 431, 503)
WITH_BODY = (413, 415, 422)  # body over 1 MiB; not JSON, or in a Content-Encoding not read; invalid
WITH_PARAMETERS = (422,)  # a path ID that is not a UUID, or an invalid query argument


class FullMatch(validate.Regexp):
    """A ``Regexp`` validator that must match the whole string.

    ``re.match`` with ``$`` accepts a trailing newline; the document's
    ECMA-262 ``^...$`` does not. Matching the whole string keeps the server
    as strict as the pattern it publishes.
    """

    def __call__(self, value: str) -> str:
        if self.regex.fullmatch(value) is None:
            raise validate.ValidationError(self._format_error(value))
        return value


# ECMA-262 for "no NUL character" (PostgreSQL cannot store one).
NO_NUL = r"^[^\u0000]*$"


class _Converter(OpenAPIConverter):
    def schema2jsonschema(self, schema):
        jsonschema = super().schema2jsonschema(schema)
        jsonschema.update(getattr(getattr(schema, "Meta", None), "json_schema", {}))
        return jsonschema


class SchemaPlugin(MarshmallowPlugin):
    """apispec's marshmallow plugin, adding a schema's ``Meta.json_schema``."""

    Converter = _Converter


class ContractPlugin(BasePlugin):
    """Declares, on every operation, the errors and headers it can answer."""

    def __init__(self, *, secured: bool, rate_limited: str | None = None) -> None:
        self.secured = secured
        self.rate_limited = rate_limited  # the path prefix whose operations the rate limit covers

    def operation_helper(self, path=None, operations=None, **kwargs) -> None:
        for operation in (operations or {}).values():
            responses = operation.setdefault("responses", {})
            limited = self.rate_limited is not None and (path or "").startswith(self.rate_limited)
            if limited:
                responses[429] = {
                    "description": TOO_MANY_REQUESTS,
                    "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
                }
                for status, response in responses.items():
                    if isinstance(response, dict) and str(status) != "401":
                        response["headers"] = {**response.get("headers", {}), **RATE_LIMIT_HEADERS}
            statuses = list(ANY_REQUEST)
            if self.secured and operation.get("security") != []:
                statuses.append(401)
            if "requestBody" in operation:
                statuses.extend(WITH_BODY)
            if "{" in (path or "") or operation.get("parameters"):
                statuses.extend(WITH_PARAMETERS)
            for status in statuses:
                if status not in responses and str(status) not in responses:
                    responses[status] = _NAMES[status]
            for status, response in responses.items():
                if isinstance(response, dict) and (headers := {**headers_for(status), **response.get("headers", {})}):
                    response["headers"] = headers  # (a named component carries its own)

