"""The request ID that follows one request across the pair and into its logs.

It lives in a context variable: each gunicorn thread (and, under gevent,
each greenlet) has its own context, so concurrent requests never see each
other's ID. The web layer binds it for the length of a request; the HTTP
client sends it on every call to cluster_svc; the logging filter stamps it on
every line written meanwhile.
"""
from __future__ import annotations

import contextvars
import re
import uuid

HEADER = "X-Request-ID"

# 1-128 visible ASCII characters, none of them a space, a double quote or a
# backslash: the value goes into response headers and log lines, where a space
# could start a forged field ("x request_id=... status=200") and a quote or
# backslash could end a quoted one. Anything else is replaced, never echoed.
_VALID = re.compile(r'[!#-\[\]-~]{1,128}')

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def accept_or_new(sent: str | None) -> str:
    """The caller's ID if it is valid, else a new one."""
    if sent and _VALID.fullmatch(sent):
        return sent
    return new_request_id()


def current_request_id() -> str | None:
    return _current.get()


def bind(request_id: str | None) -> contextvars.Token[str | None]:
    """Make ``request_id`` current; pass the token to :func:`unbind` when done."""
    return _current.set(request_id)


def unbind(token: contextvars.Token[str | None]) -> None:
    _current.reset(token)
