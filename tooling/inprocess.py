"""A service's real WSGI app served over loopback HTTP from a thread of the test's own process."""
from __future__ import annotations

import threading
from typing import Any


class InProcessServer:
    """A WSGI app (a service's real one) served on loopback from a thread of this process, with
    werkzeug's threaded server: for tests of a caller, which need the service's real answers over
    real HTTP but none of its process's start-up, signals or edge (those are the e2e tests')."""

    def __init__(self, app: Any) -> None:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class KeepAlive(WSGIRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the callers' pools expect of gunicorn

            def log_request(self, *args: Any) -> None:  # the service's own access line is the worker's
                pass

        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=KeepAlive)
        self.port = self._server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="in-process-server", daemon=True)

    def __enter__(self) -> InProcessServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
