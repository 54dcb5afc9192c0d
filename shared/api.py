"""The web application skeleton both services share.

``create_service_app`` is the factory's common part, as small named steps:
configuration, database, error handlers, observability (request IDs, metrics,
access log, health, readiness), bearer authentication, OpenAPI. Each service
adds its blueprints.
"""
from __future__ import annotations

import http
import inspect
import json
import types
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar
from urllib.parse import parse_qsl

import flask_smorest
import marshmallow as ma
from flask import Flask, Response, current_app, g, request
from idempotent_pair_client.limits import MAX_BATCH_ITEMS, MAX_BODY_BYTES  # noqa: F401 (the views read them here too)
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import RequestEntityTooLarge, UnprocessableEntity, UnsupportedMediaType
from werkzeug.routing import BaseConverter, RequestRedirect

from shared.clock import ClockWatch
from shared.apidocs import SWAGGER_UI_FILES, register_docs_page
from shared.db import Database
from shared.errors import (
    PROBLEM_JSON,
    IncompleteBody,
    Unauthorized,
    UnsupportedEncoding,
    problem_from_http,
    register_error_handlers,
)
from shared.observability import PUBLIC_ENDPOINTS, SELF_AUTHENTICATED_ENDPOINTS, register_observability
from shared.openapi import ContractPlugin, SchemaPlugin, headers_for
from shared.schemas import ProblemSchema
from shared.source import TrustedProxies, trusted_proxies


# Routes the bearer check leaves alone: health checks, /metrics (which checks
# the internal token itself) and the API documentation.
UNGUARDED_ENDPOINTS = PUBLIC_ENDPOINTS | SELF_AUTHENTICATED_ENDPOINTS | {"swagger_ui_files"}
PUBLIC_BLUEPRINTS = frozenset({"api-docs"})

class ServiceFlask(Flask):
    """Flask, remembering which functions are coroutines.

    Flask asks ``inspect.iscoroutinefunction`` of every request hook and view
    on every request (a dozen calls per request, each unwrapping partials and
    methods). The answer never changes for a function, so it is kept, keyed by
    the plain function (a method's ``__func__``: MethodView binds a new one
    per request). Anything else is asked every time, as before.
    """

    _coroutine: ClassVar[dict[Any, bool]] = {}

    def ensure_sync(self, func: Callable) -> Callable:
        key = getattr(func, "__func__", func)
        if not isinstance(key, types.FunctionType):
            return super().ensure_sync(func)
        coroutine = self._coroutine.get(key)
        if coroutine is None:
            coroutine = self._coroutine[key] = inspect.iscoroutinefunction(func)
        return super().ensure_sync(func) if coroutine else func

    def dispatch_request(self) -> Any:
        """The view, made again while a failover keeps its database from taking it (``DATABASE_WAIT_SECONDS``)."""
        database = self.extensions.get("database")
        if database is None:
            return super().dispatch_request()
        return database.through_failover(super().dispatch_request)


class ProblemApi(flask_smorest.Api):
    """flask-smorest's Api, answering and documenting errors as problem+json."""

    ERROR_SCHEMA = ProblemSchema

    def handle_http_exception(self, error):  # noqa: D102 (see flask_smorest.Api)
        return problem_from_http(error)

    def _register_responses(self) -> None:
        for status in http.HTTPStatus:
            response: dict[str, Any] = {"description": status.phrase}
            if status >= 400:
                response["content"] = {PROBLEM_JSON: {"schema": self.ERROR_SCHEMA}}
            if headers := headers_for(status):
                response["headers"] = headers
            self.spec.components.response(status.name, response, lazy=True)
        default: dict[str, Any] = {
            "description": "An error, as problem+json",
            "content": {PROBLEM_JSON: {"schema": self.ERROR_SCHEMA}},
        }
        if headers := headers_for("default"):
            default["headers"] = headers
        self.spec.components.response("DEFAULT_ERROR", default, lazy=True)


class _JsonParser(FlaskParser):
    """webargs' parser, also turning JSON Python cannot read (nested too deeply,
    integers of thousands of digits) into the 400 for invalid JSON.

    Unknown query parameters are refused like unknown body fields (the
    schema's ``unknown = RAISE``; webargs would ignore them): a misspelt
    ``limt=5`` is a 422 naming it, not a silently ignored limit.
    """

    DEFAULT_UNKNOWN_BY_LOCATION = {**FlaskParser.DEFAULT_UNKNOWN_BY_LOCATION, "query": None}

    def load_querystring(self, req, schema):
        """The query, read as strictly as a header: each parameter once, in UTF-8.

        Werkzeug would hand the first of two values to the schema and drop the
        other (``limit=2&limit=abc`` read as 2), and decode bytes that are not
        UTF-8 into replacement characters (``idempotency_key=%ff`` matching no key).

        :raise ValidationError: (422) naming each parameter sent more than once, or the query is not UTF-8.
        """
        try:
            parse_qsl(req.query_string.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            raise ma.ValidationError({"_query": ["Percent-decoded, the query string is not valid UTF-8."]}) from None
        repeated = {name: ["Send this parameter once."] for name, values in req.args.lists() if len(values) > 1}
        if repeated:
            raise ma.ValidationError(repeated)
        return super().load_querystring(req, schema)

    def _raw_load_json(self, req):
        try:
            return super()._raw_load_json(req)
        except json.JSONDecodeError:
            raise
        except (RecursionError, ValueError) as exc:
            raise json.JSONDecodeError(f"Unreadable JSON: {exc}", "<body>", 0) from None


class Blueprint(flask_smorest.Blueprint):
    """flask-smorest's Blueprint with the parser above; services use this one."""

    ARGUMENTS_PARSER = _JsonParser()

    def problem(self, status: int, description: str):
        """Document an error answer of a route, as problem+json."""
        return self.alt_response(status, schema=ProblemSchema, content_type=PROBLEM_JSON, description=description)


def documented(text: str) -> Callable[[Callable], Callable]:
    """Give a view function the docstring its OpenAPI summary and description come from
    (routes built for many resources compose it from the resource's words)."""

    def decorate(function: Callable) -> Callable:
        function.__doc__ = text
        return function

    return decorate


def unchanged(function: Callable) -> Callable:
    """The decorator that does nothing, for ``@(decorator if condition else unchanged)``."""
    return function


def no_content() -> Response:
    """A 204: no body, and so no Content-Type either."""
    response = Response(status=204)
    del response.headers["Content-Type"]
    return response


def created_location(object_id: Any) -> str:
    """The Location of an object just created by a POST to its collection."""
    return f"{request.path.rstrip('/')}/{object_id}"


BATCH = "batch"  # the path segment of a collection's batch create (cluster_svc)


class ObjectIdConverter(BaseConverter):
    """Path segment holding an object's UUID.

    A malformed or nil UUID is the caller's mistake, not a missing route, so it
    answers 422 naming the parameter instead of a bare 404. The one exception is the segment that
    names a collection's batch route (:data:`BATCH`): a method that route does not take is a 405,
    never "'batch' is not a valid UUID".
    """

    regex = rf"(?!{BATCH}$)[^/]+"

    def to_python(self, value: str) -> Any:
        try:
            parsed = uuid.UUID(value)
        except ValueError:
            raise _BadPathId(f"{value!r} is not a valid UUID.") from None
        if parsed.int == 0:
            raise _BadPathId("The nil UUID cannot name an object.")
        return parsed

    def to_url(self, value: Any) -> str:
        return str(value)


class _BadPathId(UnprocessableEntity):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.data = {"messages": {"path": [message]}}


def create_service_app(
    name: str,
    *,
    title: str,
    database: Database,
    authenticate: Callable[[str], Any | None],
    internal_token: str,
    metrics_collectors: Iterable[object] = (),
    browser_blueprints: Iterable[str] = (),
    clock: ClockWatch | None = None,
    rate_limited: str | None = None,
    testing: bool = False,
) -> tuple[Flask, ProblemApi]:
    """Build the common app: the caller registers its blueprints on the Api.

    ``authenticate`` maps a bearer token to a principal (stored in ``g.principal``)
    or ``None`` when the token is not valid. ``internal_token`` guards
    ``/metrics``; ``metrics_collectors`` add what it serves beside the counters.
    ``browser_blueprints``: blueprints of pages for a browser (platform_svc's console),
    which check a session of their own instead of a bearer token and take HTML forms.
    ``clock``: this service's measure of its clock (readiness measures it; writes
    under ``/v1`` answer 503 ``clock_skew`` while it is past the bound).
    ``rate_limited``: the path prefix of the operations that answer 429 and the rate-limit
    headers (the service counts the requests itself), for the OpenAPI document.
    """
    app = ServiceFlask(name)
    configure(app, title=title, testing=testing)
    proxies = trusted_proxies()
    if proxies:  # the client a trusted balancer names is the request's source (shared.source)
        app.wsgi_app = TrustedProxies(app.wsgi_app, proxies)  # type: ignore[method-assign]
    app.config["BROWSER_BLUEPRINTS"] = frozenset(browser_blueprints)
    database.init_app(app)
    register_error_handlers(app)
    api = ProblemApi(
        app,
        spec_kwargs={
            "security": [{"bearerAuth": []}],
            "marshmallow_plugin": SchemaPlugin(),
            "extra_plugins": [ContractPlugin(secured=True, rate_limited=rate_limited)],
        },
    )
    api.spec.components.security_scheme("bearerAuth", {"type": "http", "scheme": "bearer"})
    # First of the request hooks, so that requests the others refuse are counted and logged too.
    register_observability(
        app, api, service=title, internal_token=internal_token, database=database, collectors=metrics_collectors,
        clock=clock,
    )
    register_authentication(app, authenticate)
    if clock is not None:
        register_clock_guard(app, clock)
    app.before_request(require_json_body)
    app.url_map.converters["object_id"] = ObjectIdConverter
    api.register_converter(ObjectIdConverter, lambda converter: {"type": "string", "format": "uuid"})
    register_docs_page(app)
    return app, api


def configure(app: Flask, *, title: str, testing: bool) -> None:
    app.config.update(
        TESTING=testing,
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        API_TITLE=title,
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="docs",
        OPENAPI_SWAGGER_UI_URL=f"/{SWAGGER_UI_FILES}/",
    )


def require_json_body() -> None:
    """A body, when sent, must be JSON, unencoded, whole, and at most 1 MiB: a request is
    acted on only once it has been read whole and understood.

    :raise 415: it is not JSON (said plainly, instead of reporting missing fields), or it
        comes in a ``Content-Encoding`` other than ``identity`` (which this service does not read).
    :raise IncompleteBody: it ended before its ``Content-Length`` (the client stopped
        sending, or half-closed): nothing is stored.
    :raise 413: a chunked body ran past the limit. Werkzeug stops reading a body
        without Content-Length at MAX_CONTENT_LENGTH without complaint, and the
        cut-off prefix must not be parsed as if it were the whole body.
    """
    if request.method not in ("POST", "PUT", "PATCH") or request.blueprint in current_app.config["BROWSER_BLUEPRINTS"]:
        return
    chunked = request.content_length is None and bool(request.headers.get("Transfer-Encoding"))
    if request.content_length or chunked:
        if not request.is_json:
            raise UnsupportedMediaType("Send the request body as JSON with 'Content-Type: application/json'.")
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise UnsupportedEncoding(
                f"The Content-Encoding {encoding!r} is not read here; send the JSON body unencoded."
            )
    if chunked:
        request.get_data(cache=True)
        if request.stream.is_exhausted:
            raise RequestEntityTooLarge()
    elif request.content_length:
        received = len(request.get_data(cache=True))
        if received < request.content_length:
            raise IncompleteBody(
                f"The body ended after {received} of the {request.content_length} bytes its Content-Length"
                " announced; nothing was done. Send the whole request again."
            )


WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def register_clock_guard(app: Flask, clock: ClockWatch) -> None:
    """Writes to the API (under ``/v1``) wait for a clock within the bound: each is where an ID is
    minted or judged by age. Reads go on, and so do the operations routes.

    The check costs two clock reads; a query only when the last measurement is
    old or the clock stepped since (:meth:`ClockWatch.refresh`).
    """

    @app.before_request
    def require_a_sane_clock() -> None:
        if request.method in WRITES and request.path.startswith("/v1/"):
            clock.check()


def register_authentication(app: Flask, authenticate: Callable[[str], Any | None]) -> None:
    @app.before_request
    def require_bearer_token() -> None:
        if request.endpoint in UNGUARDED_ENDPOINTS or request.blueprint in PUBLIC_BLUEPRINTS:
            return
        if request.blueprint in app.config["BROWSER_BLUEPRINTS"]:
            return  # a session of their own (no bearer token opens them, nor is one needed)
        if isinstance(request.routing_exception, RequestRedirect):
            return  # a path missing its slash (/console): the redirect, which opens nothing
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        principal = authenticate(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if principal is None:
            raise Unauthorized()
        g.principal = principal

