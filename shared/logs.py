"""One logging setup for both services, gunicorn and the reconciler.

``LOG_FORMAT=json`` writes one JSON object per line (``ts``, ``level``,
``service``, ``logger``, ``msg``, plus ``request_id`` while a request is
being handled, and ``method``, ``route``, ``status``, ``duration_ms`` on the
access line); anything else, readable text. Everything goes to stderr through
the root logger: gunicorn's own loggers are pointed at it by the same
configuration (``logging_config`` is handed to gunicorn as its
``logconfig_dict``), so its lines have the same shape.

What is logged never includes a request body, a header value other than the
request ID, or SQL parameters.
"""
from __future__ import annotations

import logging
import logging.config
import os
from typing import Any

from idempotent_pair_client.request_id import current_request_id
from pythonjsonlogger.json import JsonFormatter

from shared.config import ConfigError

FORMATS = ("text", "json")


def log_format(environ: dict[str, str] | None = None) -> str:
    """:raise ConfigError: LOG_FORMAT is set to something else than text or json."""
    value = (environ if environ is not None else os.environ).get("LOG_FORMAT", "").strip().lower() or "text"
    if value not in FORMATS:
        raise ConfigError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


class RequestIdFilter(logging.Filter):
    """Stamps the current request's ID on every record logged while it is handled."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            request_id = current_request_id()
            if request_id is not None:
                record.request_id = request_id
        return True


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> [<service>] <logger>: <message> [request_id=<id>]``."""

    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)s [{service}] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", None)
        return f"{line} request_id={request_id}" if request_id else line


def json_formatter(service: str) -> logging.Formatter:
    formatter = JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger", "message": "msg"},
        static_fields={"service": service},
        timestamp="ts",
    )
    return formatter


def make_formatter(service: str, fmt: str) -> logging.Formatter:
    # Every request writes an access line, so the per-record work counts: skip
    # what no line shows (the caller's frame, thread, process names), as the
    # logging HOWTO's "Optimization" section suggests. Set here because this
    # runs wherever the configuration is applied, gunicorn's master included.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    return json_formatter(service) if fmt == "json" else TextFormatter(service)


def logging_config(service: str, fmt: str | None = None, level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document: everything through one stderr handler.

    gunicorn gets it as ``logconfig_dict`` (it replaces the "loggers" of its
    defaults with these, so its error and access loggers lose their own
    handlers and propagate to root).
    """
    fmt = fmt or log_format()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"default": {"()": make_formatter, "service": service, "fmt": fmt}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "default",
                "filters": ["request_id"],
            }
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": [], "propagate": True},
            "gunicorn.access": {"level": level, "handlers": [], "propagate": True},
            # urllib3 warns of what our own lines already say, in its words: a call that failed
            # (the push's outcome, "cluster_svc does not answer") or a connection opened beyond
            # the pool and dropped after (shared/transport.py's pools do that on purpose).
            "urllib3.connectionpool": {"level": "ERROR"},
        },
    }


def configure_logging(service: str, fmt: str | None = None) -> None:
    """Set up logging for a command that does not run under gunicorn (the reconciler, say)."""
    logging.config.dictConfig(logging_config(service, fmt))
