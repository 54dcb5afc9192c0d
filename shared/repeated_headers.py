"""Which header fields a request carried on more than one line.

gunicorn joins repeated field lines with "," before the app sees them
(``Idempotency-Key: one`` and ``Idempotency-Key: two`` become
``HTTP_IDEMPOTENCY_KEY = "one,two"``) and keeps no trace of the lines in the
WSGI environ, so for a field that must come once, "one,two" sent on one line
and two lines look the same. The services' gunicorn worker
(:mod:`shared.gunicorn_worker`) records the names of the fields that came on
more than one line under :data:`ENVIRON_KEY`, from gunicorn's parsed list of
lines. Under another server (Flask's test client, say) the key is absent and
nothing counts as repeated. A proxy in front that combines the lines itself
(RFC 9110 section 5.3 lets it) leaves a single line, which cannot be told apart.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ENVIRON_KEY = "idempotent_pair.repeated_headers"  # a frozenset of upper-case field names, present when not empty


def names_repeated(lines: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The (upper-case) names that appear on more than one of ``lines``."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for name, _ in lines:
        name = name.upper()
        (repeated if name in seen else seen).add(name)
    return frozenset(repeated)


def came_repeated(environ: Mapping[str, Any], name: str) -> bool:
    """Whether the request carried the field ``name`` on more than one line (as far as the server told)."""
    return name.upper() in environ.get(ENVIRON_KEY, ())
