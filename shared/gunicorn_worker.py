"""gunicorn's threaded worker, answering malformed HTTP as problem+json; and
its logger, minus the access line.

Requests gunicorn cannot parse (a NUL in a header, a 10 KB request line, two
Content-Lengths, ...) never reach Flask: gunicorn answers them itself with an
HTML page. gunicorn has no hook for that page, so this worker replaces the
function that writes it, once per worker process, keeping every error the
services send in the one envelope.
"""

from __future__ import annotations

import json
from http import HTTPStatus

from gunicorn import glogging, util
from gunicorn.workers.gthread import ThreadWorker

from shared.errors import PROBLEM_JSON, TYPE_PREFIX

_CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "request_header_fields_too_large",
    500: "internal_error",
}


def write_problem(sock, status_int: int, reason: str, mesg: str) -> None:
    if status_int == 501:
        # gunicorn's answer to a Transfer-Encoding it does not support: the
        # client's request is at fault, and no client input may cause a 5xx.
        status_int = 400
    reason = HTTPStatus(status_int).phrase
    code = _CODES.get(status_int, "bad_request")
    detail = mesg if status_int < 500 else "The server failed to handle this request; it has been logged."
    body = json.dumps(
        {"type": TYPE_PREFIX + code, "title": reason, "status": status_int, "detail": detail, "code": code}
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: {PROBLEM_JSON}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    util.write_nonblock(sock, head + body)


class ProblemThreadWorker(ThreadWorker):
    def init_process(self) -> None:
        util.write_error = write_problem
        super().init_process()


class AccessLoggedByApp(glogging.Logger):
    """gunicorn's logger without its access line: the app writes one per request
    itself (shared.observability), with the route, the request ID and the
    duration, so a second line would only double the volume."""

    def access(self, resp, req, environ, request_time) -> None:
        return None
