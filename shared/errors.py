"""One error envelope: RFC 9457 problem+json, with a stable machine ``code``.

Services raise the typed errors below; :func:`register_error_handlers` maps
them, HTTP exceptions (routing, body size, webargs validation) and anything
unexpected to a problem document. An unexpected exception is logged with its
traceback and answered with a generic 500 that leaks nothing.

A database that cannot be reached (refused, restarted under us, pool
exhausted, not the primary yet during a failover) is not a bug: it answers 503 ``unavailable`` with ``Retry-After``
and logs one line, so an outage of the database does not turn every request
into a traceback.
"""
from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from flask import Flask, Response, json, request
from gunicorn.http.errors import ParseException
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:problem-type:"
RETRY_AFTER_SECONDS = 2  # what a 503 for an unreachable database asks the caller to wait

log = logging.getLogger(__name__)


class HttpProblem(Exception):
    """An error a service answers as problem+json, one the client can act on; subclasses fix status and code.

    (What a caller's client raises for such an answer is :class:`idempotent_pair_client.core.ProblemError`.)
    """

    status: int = 500
    code: str = "internal_error"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}
        self.extensions = extensions

    def body(self) -> dict[str, Any]:
        """The problem document, for an answer that carries it inside a larger body (a batch item)."""
        return problem_body(self.status, self.code, self.detail, **self.extensions)


class Unauthorized(HttpProblem):
    status, code = 401, "unauthorized"

    def __init__(self, detail: str = "A valid 'Authorization: Bearer <token>' header is required.") -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class NotFound(HttpProblem):
    status, code = 404, "not_found"


class Conflict(HttpProblem):
    status, code = 409, "conflict"


class IdConflict(Conflict):
    """The ID exists with different immutable fields: the caller reused an ID."""

    code = "id_conflict"

    def __init__(self, resource: str, object_id: Any, conflicts: list[dict[str, Any]]) -> None:
        names = ", ".join(c["field"] for c in conflicts)
        super().__init__(
            f"{resource} {object_id} already exists with a different {names}; "
            "an ID names one object and cannot be reused for another.",
            conflicts=conflicts,
        )


class Gone(HttpProblem):
    """The object (or its parent) was deleted: its tombstone answers, and the ID is never used again."""

    status, code = 410, "gone"


class IdExpired(HttpProblem):
    """An ID older than the UUIDv7 horizon, with no row: never created (nor recorded) again."""

    status, code = 410, "id_expired"


class TryAgain(HttpProblem):
    """Nothing was stored, for a reason that passes: the caller should send the same request again."""

    status, code = 503, "unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


class PayloadTooLarge(HttpProblem):
    """A body past the service's limit, refused before it is read."""

    status, code = 413, "payload_too_large"


class IncompleteBody(HttpProblem):
    """The body ended before its Content-Length: an incomplete message is not acted on."""

    status, code = 400, "incomplete_body"


class UnsupportedEncoding(HttpProblem):
    status, code = 415, "unsupported_content_encoding"


class ValidationFailed(HttpProblem):
    status, code = 422, "validation_error"

    def __init__(self, errors: dict[str, Any], detail: str = "The request is not valid; see 'errors'.") -> None:
        super().__init__(detail, errors=errors)


class IdFromTheFuture(ValidationFailed):
    """A UUIDv7 more than the future tolerance ahead of this server's clock: a code of its own,
    so a caller can tell it from a body it must fix (time cures it; a skewed clock may be the cause)."""

    code = "id_from_the_future"


# Codes for HTTP errors raised by Flask, Werkzeug and webargs rather than by us,
# and for those gunicorn answers itself before a request reaches Flask
# (shared.gunicorn_worker): one table, so a status has one code whoever answers.
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
    411: "length_required",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    417: "expectation_failed",
    422: "validation_error",
    429: "too_many_requests",
    431: "request_header_fields_too_large",
    500: "internal_error",
}


def problem_body(status: int, code: str, detail: str, **extensions: Any) -> dict[str, Any]:
    """The problem document itself (RFC 9457 members, our ``code``, any extensions)."""
    return {
        "type": TYPE_PREFIX + code,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        **extensions,
    }


def problem(status: int, code: str, detail: str, *, headers: dict[str, str] | None = None, **extensions: Any) -> Response:
    """Build a problem+json response."""
    body = problem_body(status, code, detail, **extensions)
    response = Response(json.dumps(body), status=status, mimetype=PROBLEM_JSON)
    response.headers.update(headers or {})
    return response


def problem_from(error: HttpProblem) -> Response:
    return problem(error.status, error.code, error.detail, headers=error.headers, **error.extensions)


def problem_from_http(error: HTTPException) -> Response:
    """Map a Werkzeug/webargs HTTP exception, keeping its validation messages."""
    status = error.code or 500
    if status >= 500:
        return _internal_error(error)
    code = HTTP_CODES.get(status, "http_error")
    detail = error.description or HTTPStatus(status).phrase
    data = getattr(error, "data", None) or {}
    extensions: dict[str, Any] = {}
    messages = data.get("messages")
    if messages:
        extensions["errors"] = messages
        if status == 422:
            detail = "The request is not valid; see 'errors'."
        elif status == 400 and "json" in messages:
            detail = "The request body is not valid JSON."
    if status == 413:
        detail = "The request body is larger than the 1 MiB limit."
    headers = {}
    if status == 405:
        allowed = error.get_headers().__iter__()
        headers = {k: v for k, v in allowed if k.lower() == "allow"}
    return problem(status, code, detail, headers=headers, **extensions)


# SQLSTATEs that say "this server is not the primary (any more, or yet)" or "this
# session is gone": the connection is of no further use (shared.db discards it),
# and the request answers 503. 25006: a write on a standby, on a primary being
# demoted, or on one promoted a moment ago that does not accept writes yet.
# 57P01-57P03: shut down or starting up; class 08: the connection failed
# (PgBouncer answers 08P01 when its server connection is gone or cannot be made).
NOT_THE_PRIMARY = frozenset({"25006", "57P01", "57P02", "57P03"})
CONNECTION_EXCEPTION_CLASS = "08"


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE a database error carries, if any (psycopg2's ``pgcode``)."""
    return getattr(getattr(error, "orig", None), "pgcode", None) or getattr(error, "pgcode", None)


def connection_unusable(error: BaseException) -> bool:
    """Whether the connection ``error`` came from must be discarded, never used again:
    its server is not (or no longer) a writable primary, or the session ended."""
    code = sqlstate(error)
    return code is not None and (code in NOT_THE_PRIMARY or code.startswith(CONNECTION_EXCEPTION_CLASS))


def database_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or used right now.

    psycopg2's OperationalError covers a refused or dropped connection, a
    server shutting down, and the transient refusals (deadlock, serialization
    failure 40001, statement cancelled); a closed connection surfaces as an
    InterfaceError; SQLAlchemy adds its own for an invalidated connection and
    an exhausted pool; and a server that is not the primary (yet) answers a
    write with 25006 (an InternalError in psycopg2's classes): see
    :func:`connection_unusable`. All of them heal by themselves (a failover
    ends, a transaction is tried again): a retry is the cure.
    """
    if isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError)):
        return True
    if isinstance(error, sa_exc.TimeoutError):  # no pooled connection free in time
        return True
    if isinstance(error, sa_exc.DBAPIError) and connection_unusable(error):
        return True
    return isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated


def describe_database_error(error: BaseException) -> str:
    """One line naming the failure, without the SQL statement or its parameters."""
    cause = getattr(error, "orig", None) or error
    first_line = (str(cause).strip().splitlines() or [""])[0][:200]
    return f"{type(cause).__name__}: {first_line}" if first_line else type(cause).__name__


def _request_line() -> str:
    return f"{request.method} {request.path}" if request else "-"


def database_error(error: sa_exc.SQLAlchemyError) -> Response:
    if not database_unavailable(error):
        return _internal_error(error)
    log.warning("503 %s: database unavailable (%s)", _request_line(), describe_database_error(error))
    return database_unavailable_problem()


def database_unavailable_problem() -> Response:
    """The one answer to a request the database cannot serve now: 503 ``unavailable``
    with ``Retry-After``, whether a query failed or readiness found the database away."""
    return problem(
        503,
        "unavailable",
        "The database cannot be reached right now. Try again shortly.",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _malformed_framing(error: Exception) -> Response:
    """gunicorn could not read the body's framing (a chunk size that is not hex, chunk data without
    its CRLF, a body that ends early): the client's fault, so a 400, and one line naming the kind
    of error, never its message, which quotes the bytes read (the body, a password in a form)."""
    log.warning("400 %s: malformed body framing (%s)", _request_line(), type(error).__name__)
    return problem(400, "bad_request", "The request's body framing (its chunked transfer coding) is malformed.")


def _internal_error(error: BaseException) -> Response:
    # One record per 5xx naming the request; the traceback is kept for what is
    # genuinely unexpected (SQL parameters never appear: engines hide them).
    log.error("500 %s: unhandled %s", _request_line(), type(error).__name__, exc_info=error)
    return problem(500, "internal_error", "The server failed to handle this request; it has been logged.")


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(HttpProblem, problem_from)
    app.register_error_handler(HTTPException, problem_from_http)
    app.register_error_handler(sa_exc.SQLAlchemyError, database_error)
    app.register_error_handler(ParseException, _malformed_framing)
    app.register_error_handler(Exception, _internal_error)
