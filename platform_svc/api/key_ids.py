"""The mark on every API key id the platform issues: an HMAC of the id's random part under a
secret the platform's processes share, so that a worker tells a made-up key id from a key issued
a moment ago without a statement (:mod:`platform_svc.api.admission`).

An id is 16 random hex digits, then :data:`MARK_DIGITS` of the mark. Ids issued before the mark
existed have none: they are in every worker's set of live ids, or they are no key. The secret is a
``console_keys`` row (``key_ids``), made by the first process that needs it.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import Connection, text

# The secret that marks the key ids this platform issued (a console_keys row, made by the first
# process that needs it; every process reads the same).
KEY_ID_SECRET = text("""
WITH made AS (
    INSERT INTO console_keys (name, secret) VALUES ('key_ids', :secret) ON CONFLICT (name) DO NOTHING RETURNING secret
)
SELECT secret FROM made UNION ALL SELECT secret FROM console_keys WHERE name = 'key_ids'
""")
MARK_DIGITS = 8  # hex digits of the mark after the 16 of the random id


def key_id_secret(db_session: Connection) -> str:
    """The secret that marks key ids (made now if no process has made it yet)."""
    return db_session.execute(KEY_ID_SECRET, {"secret": secrets.token_urlsafe(48)}).scalars().first()


def _mark(secret: str, random_part: str) -> str:
    return hmac.new(secret.encode(), random_part.encode(), hashlib.sha256).hexdigest()[:MARK_DIGITS]


def new_key_id(secret: str) -> str:
    """A new key id: 16 random hex digits, then their mark."""
    random_part = secrets.token_hex(8)
    return random_part + _mark(secret, random_part)


def issued_here(secret: str, key_id: str) -> bool:
    """Whether ``key_id`` carries the mark of a key id this platform issued (no statement)."""
    return len(key_id) == 16 + MARK_DIGITS and hmac.compare_digest(_mark(secret, key_id[:16]), key_id[16:])
