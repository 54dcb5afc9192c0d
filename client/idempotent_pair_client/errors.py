"""What a refusal means, one class per meaning: a caller catches the kind it handles
(``except NotFound``) instead of comparing ``.status`` or ``.code`` strings.

Every one is a :class:`ProblemError` carrying the refused call, its ``status``, the
problem's ``code``, the whole RFC 9457 body (``problem``) and the ``request_id`` every
attempt of the call carried (the services log it), and a :class:`ClientError`, as
:class:`NoAnswer` (no answer at all; ``.error`` keeps the last attempt's cause) is.
"""
from __future__ import annotations

from typing import Any

from idempotent_pair_client.transport import ClientError, NoAnswer, reason

__all__ = [
    "ClientError", "Conflict", "Gone", "IdempotencyKeyReused", "NoAnswer", "NotFound", "ProblemError", "RateLimited",
    "Unauthorized", "Unavailable", "ValidationFailed", "problem_error",
]


class ProblemError(ClientError):
    """The service refused the call: ``status``, the problem's ``code`` (None without one), ``problem``
    (the RFC 9457 body, ``{}`` when the answer had none) and ``request_id``."""

    def __init__(self, call: str, status: int, problem: Any, request_id: str | None = None) -> None:
        self.call = call  # "POST /v1/...", what was refused
        self.status = status
        self.problem: dict[str, Any] = problem if isinstance(problem, dict) else {}
        code = self.problem.get("code")
        self.code: str | None = code if isinstance(code, str) else None
        self.request_id = request_id
        super().__init__(reason(call, status, self.problem) + (f" (request {request_id})" if request_id else ""))


class Unauthorized(ProblemError):
    """401 or 403: the API key or token is missing, wrong or revoked."""


class NotFound(ProblemError):
    """404: no such object (in this account), or no such parent."""


class Gone(ProblemError):
    """410: the object was deleted (or its ID is past the horizon: ``id_expired``)."""


class Conflict(ProblemError):
    """409: the ID holds another object (``id_conflict``), or another conflict the code names."""


class ValidationFailed(ProblemError):
    """422 (or 400) refusing the body: ``fields`` maps each field to what is wrong with it; ``str()`` says it."""

    def __init__(self, call: str, status: int, problem: Any, request_id: str | None = None) -> None:
        super().__init__(call, status, problem, request_id)
        self.fields: dict[str, list[str]] = _flatten(self.problem.get("errors"))
        if self.fields:
            self.args = (f"{self.args[0]}; " + "; ".join(
                f"{name}: {' '.join(messages)}" for name, messages in self.fields.items()),)


class IdempotencyKeyReused(ProblemError):
    """422 ``idempotency_key_reused``: the key went with another body before; make a new one."""


class RateLimited(ProblemError):
    """429 still answered when ``retry_for`` ran out: the account's requests per second are spent."""


class Unavailable(ProblemError):
    """A 5xx (or 408) still answered when ``retry_for`` ran out: the service could not serve it."""


def problem_error(call: str, status: int, problem: Any, request_id: str | None = None) -> ProblemError:
    """The :class:`ProblemError` of this meaning: by the problem's code first, then by the status."""
    code = problem.get("code") if isinstance(problem, dict) else None
    if code == "idempotency_key_reused":
        kind: type[ProblemError] = IdempotencyKeyReused
    elif code == "validation_error" or status == 422:
        kind = ValidationFailed
    else:
        kind = _BY_STATUS.get(status) or (Unavailable if status >= 500 else ProblemError)
    return kind(call, status, problem, request_id)


_BY_STATUS: dict[int, type[ProblemError]] = {
    401: Unauthorized, 403: Unauthorized, 404: NotFound, 408: Unavailable, 409: Conflict, 410: Gone, 429: RateLimited,
}


def _flatten(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """marshmallow's nested ``errors`` (``{"json": {"storage_gb": ["..."]}}``) as ``{"storage_gb": ["..."]}``."""
    if isinstance(errors, list):
        return {prefix or "body": [str(message) for message in errors]}
    if not isinstance(errors, dict):
        return {}
    flat: dict[str, list[str]] = {}
    for name, inner in errors.items():
        where = str(name) if not prefix or prefix in ("json", "query", "headers") else f"{prefix}.{name}"
        flat.update(_flatten(inner, where))
    return flat
