"""The API's docs page (``/docs``, flask-smorest's Swagger UI): its files served from the installed
swagger-ui-bundle, so it needs no internet, and the page itself locked down as the console is.

The page shares its origin with platform_svc's console, so a script it ran could read console
pages: it may run its own two files and its one inline script, and nothing else. The inline
script's SHA-256 goes into the Content-Security-Policy as rendered (it holds the spec's URL and the
page's configuration), so no ``'unsafe-inline'`` is needed for scripts. Swagger UI styles its
elements inline and draws its icons as ``data:`` images: those stay allowed, neither runs code.
The page may not be framed, and sends no form anywhere.
"""
from __future__ import annotations

import base64
import hashlib
import re

from flask import Flask, Response, request, send_from_directory
from swagger_ui_bundle import swagger_ui_path
from werkzeug.exceptions import NotFound

SWAGGER_UI_FILES = "docs/swagger-ui"
DOCS_PAGE = "api-docs.openapi_swagger_ui"  # flask-smorest's endpoint for /docs
# The files /docs loads (flask-smorest's page), and no others: the bundle's own
# index.html and swagger-initializer.js would point a browser at another host.
SWAGGER_UI_SERVED = frozenset(
    {"swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "favicon-32x32.png",
     "favicon-16x16.png"}
)
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def swagger_ui_file(filename: str) -> Response:
    """:raise 404: not a file /docs loads."""
    if filename not in SWAGGER_UI_SERVED:
        raise NotFound()
    return send_from_directory(swagger_ui_path, filename, max_age=3600)


def content_security_policy(page: bytes) -> str:
    """The page's policy: its own files, and its inline scripts by their hashes."""
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(page)
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


def secure_docs_page(response: Response) -> Response:
    if request.endpoint == DOCS_PAGE and response.status_code == 200:
        response.headers["Content-Security-Policy"] = content_security_policy(response.get_data())
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
    return response


def register_docs_page(app: Flask) -> None:
    app.add_url_rule(f"/{SWAGGER_UI_FILES}/<path:filename>", "swagger_ui_files", swagger_ui_file)
    app.after_request(secure_docs_page)
