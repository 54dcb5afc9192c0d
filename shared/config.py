"""Settings read from the environment, failing fast.

A required setting has no default: a missing one stops start-up with a single
line that names it, instead of a traceback from deep inside the first request.
"""
from __future__ import annotations

import hmac
import os
from collections.abc import Mapping

# prometheus-client's setting: the directory where gunicorn workers keep their
# counts (set by ``serve``, see shared.cli and shared.metrics). Defined here,
# where importing it loads nothing: shared.metrics imports prometheus-client,
# which must not be loaded before the setting is made.
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

# The UUIDv7 horizon (see shared.horizon): both services read it, and must agree.
ID_HORIZON_SECONDS = "ID_HORIZON_SECONDS"
DEFAULT_ID_HORIZON_SECONDS = 30 * 24 * 3600


class ConfigError(Exception):
    """A required setting is missing or malformed; the message is one line."""


def require(name: str, environ: Mapping[str, str] | None = None, *, why: str = "") -> str:
    """Return the non-empty value of ``name``.

    :raise ConfigError: when it is unset or empty.
    """
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    if not value:
        hint = f" ({why})" if why else ""
        raise ConfigError(f"{name} is not set{hint}")
    return value


def database_url(name: str, environ: Mapping[str, str] | None = None) -> str:
    """A required SQLAlchemy URL for PostgreSQL through psycopg2.

    ``postgresql://`` is accepted and pinned to psycopg2, because SQLAlchemy 2.1
    would otherwise pick psycopg 3, which this project does not install.

    :raise ConfigError: when it is unset or not a PostgreSQL URL.
    """
    url = require(name, environ, why="a postgresql+psycopg2:// URL")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
        raise ConfigError(f"{name} must be a postgresql+psycopg2:// URL, got scheme {scheme!r}")
    return "postgresql+psycopg2://" + rest


def integer(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """An optional integer setting.

    :raise ConfigError: when it is set but not an integer.
    """
    env = os.environ if environ is None else environ
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


def id_horizon_seconds(environ: Mapping[str, str] | None = None) -> int:
    """``ID_HORIZON_SECONDS``: how old (by the time a UUIDv7 carries) an ID may be and still
    be created; :data:`DEFAULT_ID_HORIZON_SECONDS` (30 days) when unset.

    :raise ConfigError: it is set but not a positive integer.
    """
    seconds = integer(ID_HORIZON_SECONDS, DEFAULT_ID_HORIZON_SECONDS, environ)
    if seconds < 1:
        raise ConfigError(f"{ID_HORIZON_SECONDS} must be a positive number of seconds, got {seconds}")
    return seconds


def seconds(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """An optional duration in seconds (a decimal number, more than 0).

    :raise ConfigError: when it is set but not a positive number.
    """
    env = os.environ if environ is None else environ
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{name} must be a number of seconds above 0, got {raw!r}")
    return value


INTERNAL_TOKEN = "INTERNAL_TOKEN"


def internal_tokens(raw: str) -> tuple[str, ...]:
    """The tokens an ``INTERNAL_TOKEN`` value holds: one, or several separated by commas.

    cluster_svc (and ``/metrics`` on either service) accepts any of them; a
    caller presents the first. That is what lets a token be rotated without a
    refused call: the new one is added second everywhere, then put first, then
    the old one dropped (docs/operations.md, "Rotating the internal token").

    :raise ConfigError: no token at all, or an empty one (two commas in a row, one at either end).
    """
    tokens = tuple(token.strip() for token in raw.split(","))
    if not any(tokens):
        raise ConfigError(f"{INTERNAL_TOKEN} is not set")
    if not all(tokens):
        raise ConfigError(f"{INTERNAL_TOKEN} holds an empty token (two commas in a row, or one at either end)")
    return tokens


def checked_internal_token(environ: Mapping[str, str] | None = None, *, why: str = "") -> str:
    """``INTERNAL_TOKEN`` as set, once :func:`internal_tokens` has read it.

    :raise ConfigError: unset, or holding an empty token.
    """
    raw = require(INTERNAL_TOKEN, environ, why=why)
    internal_tokens(raw)
    return raw


def token_accepted(sent: str, accepted: tuple[str, ...]) -> bool:
    """Whether ``sent`` is one of the ``accepted`` tokens, each compared in constant time.

    Every token is compared, whichever matches, so the time taken does not say
    which one (or how many) the sender got right.
    """
    sent_bytes = sent.encode()
    matched = False
    for token in accepted:
        matched |= hmac.compare_digest(sent_bytes, token.encode())
    return matched
