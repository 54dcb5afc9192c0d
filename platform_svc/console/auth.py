"""Who may use the console, and how a browser proves it: operators, sessions, CSRF tokens, headers.

An *operator* is a credential of its own: a name and the SHA-256 of a one-time
secret (as an API key's secret is kept). Neither an account's API key nor the
internal token opens a console page: the console never reads an
``Authorization`` header.

A session is a row of ``console_sessions``, named in Flask's signed cookie by a
random token (the row keeps only its SHA-256), beside the session's CSRF token.
Every worker and replica reads the same rows. Logout deletes the row, so a copied
cookie opens nothing after it; a session lasts at most 8 hours from its login
(not from its last page) and ends after 30 minutes without a page. The cookie is
signed with a key kept in the ``console_keys`` table (made once by the first
process that needs it): nothing to configure, and all processes agree.
``create-operator`` run again (a new secret) or ``revoke-operator`` deletes that
operator's sessions at once.

Every POST carries the session's CSRF token in a hidden ``csrf_token`` field
(the synchronizer-token pattern; with SameSite=Strict on the cookie, a page of
another site can neither send the cookie nor read the token). The check is a
constant-time comparison of two strings: a library (Flask-WTF) would bring
forms and a second signing scheme for what is ten lines here.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import uuid
from datetime import timedelta

from flask import Flask, Request, abort, g, redirect, request, session, url_for
from flask.sessions import SecureCookieSessionInterface
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert

from platform_svc.api.admission import hash_secret
from platform_svc.models import ConsoleKey, ConsoleSession, Operator
from shared.db import Database

SESSION_LIFETIME = timedelta(hours=8)  # from the login, whatever the use
IDLE_TIMEOUT = timedelta(minutes=30)  # without a page
COOKIE = "console_session"
SIGNING_KEY = "session"  # the console_keys row

# What a console page may load: its own stylesheet, nothing else; no script at all, no framing.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# Operators (each function takes the session, never commits) ------------------------------


def create_operator(*, db_session: Connection, name: str) -> str:
    """Create the operator ``name``, or replace its secret (and so end its sessions); return the
    new secret, which is never stored."""
    secret = secrets.token_urlsafe(32)
    values = {"id": uuid.uuid4(), "secret_hash": hash_secret(secret), "created_at": func.now()}
    table = Operator.__table__
    db_session.execute(delete(ConsoleSession).where(
        ConsoleSession.operator_id.in_(select(Operator.id).where(Operator.name == name))
    ))
    db_session.execute(
        insert(table).values(name=name, **values).on_conflict_do_update(index_elements=[table.c.name], set_=values)
    )
    return secret


def revoke_operator(*, db_session: Connection, name: str) -> bool:
    """Remove the operator ``name`` (its sessions end with it); whether there was one."""
    return db_session.execute(delete(Operator).where(Operator.name == name).returning(Operator.id)).first() is not None


def check_secret(*, db_session: Connection, name: str, secret: str) -> uuid.UUID | None:
    """The operator's row ID when ``secret`` is its secret, else None.

    Looked up by the secret's hash (a unique index, migration 0012), the name checked with it: a
    wrong secret finds no index entry whether the name exists or not, so a known and an unknown
    name take the same path and the same time. (Looked up by name, a known name fetched its row
    and an unknown one did not: about 10 µs apart, measured.)
    """
    return db_session.execute(
        select(Operator.id).where(Operator.secret_hash == hash_secret(secret), Operator.name == name)
    ).scalar()


# A live session's operator, its last page recorded; none past its lifetime or its idle timeout.
SEEN = text(f"""
UPDATE console_sessions s SET seen_at = now() FROM operators o
WHERE s.token_hash = :token_hash AND o.id = s.operator_id
  AND s.created_at > now() - interval '{int(SESSION_LIFETIME.total_seconds())} seconds'
  AND s.seen_at > now() - interval '{int(IDLE_TIMEOUT.total_seconds())} seconds'
RETURNING o.name
""")


def operator_of_session(*, db_session: Connection, token: str) -> str | None:
    """The name of the operator whose live session ``token`` names (and that session is seen now)."""
    return db_session.execute(SEEN, {"token_hash": hash_secret(token)}).scalar()


# Sessions ----------------------------------------------------------------------------------


class SigningKey:
    """The key session cookies are signed with: the ``console_keys`` row, made by the first process
    that asks (the others read the one it made), and kept in memory after that."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._key: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        if self._key is None:
            with self._lock, self.database.begin() as db_session:
                table = ConsoleKey.__table__
                db_session.execute(
                    insert(table).values(name=SIGNING_KEY, secret=secrets.token_urlsafe(48)).on_conflict_do_nothing()
                )
                self._key = db_session.execute(select(table.c.secret).where(table.c.name == SIGNING_KEY)).scalar_one()
        return self._key


class ConsoleSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, signed with :class:`SigningKey` and marked ``Secure`` whenever
    the request came over TLS (``request.is_secure``: gunicorn sets it from ``X-Forwarded-Proto``
    when the proxy is one of its ``--forwarded-allow-ips``)."""

    def __init__(self, key: SigningKey) -> None:
        self.key = key

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer:
        return URLSafeTimedSerializer(
            self.key(), salt=self.salt, serializer=self.serializer,
            signer_kwargs={"key_derivation": self.key_derivation, "digest_method": self.digest_method},
        )

    def open_session(self, app: Flask, request: Request):
        if not request.cookies.get(self.get_cookie_name(app)):
            return self.session_class()  # the API's requests: no key, no signature to check
        return super().open_session(app, request)

    def save_session(self, app: Flask, session, response) -> None:
        if not session and not session.modified:
            return  # the API's requests: nothing to write, and nothing to look up for it
        super().save_session(app, session, response)

    def get_cookie_secure(self, app: Flask) -> bool:
        return request.is_secure


def configure_sessions(app: Flask, database: Database) -> None:
    """The console's cookie: HttpOnly, SameSite=Strict, sent to /console only, for eight hours."""
    app.session_interface = ConsoleSessions(SigningKey(database))
    app.config.update(
        SESSION_COOKIE_NAME=COOKIE,
        SESSION_COOKIE_PATH="/console",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
        SESSION_REFRESH_EACH_REQUEST=False,  # the cookie's expiry is the login's, never pushed back
    )


def csrf_token() -> str:
    """The session's CSRF token (made on first use): every form's hidden ``csrf_token`` field."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def check_csrf() -> None:
    """:raise 400: the form's ``csrf_token`` is missing or is not the session's."""
    sent, expected = request.form.get("csrf_token", ""), session.get("csrf", "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(400, "The form's CSRF token is missing or stale; reload the page and submit it again.")


def confirmation_token(action: str) -> str:
    """The token of one destructive ``action`` (``"abandon clusters <id>"``) for this session: the
    confirmation page's form carries it, and only a POST with it does the action."""
    return hmac.new(csrf_token().encode(), action.encode(), hashlib.sha256).hexdigest()


def confirmed(action: str) -> bool:
    """Whether the form is the confirmation page's of ``action`` (its own token), not a first POST."""
    return hmac.compare_digest(request.form.get("confirm", "").encode(), confirmation_token(action).encode())


def open_session(db_session: Connection, operator_id: uuid.UUID) -> None:
    """Log in: a new session row (and a new CSRF token) for the operator."""
    token = secrets.token_urlsafe(32)
    db_session.execute(insert(ConsoleSession).values(token_hash=hash_secret(token), operator_id=operator_id))
    session.clear()
    session.permanent = True
    session["sid"] = token
    session["csrf"] = secrets.token_urlsafe(32)


def close_session(db_session: Connection) -> None:
    """Log out: the session's row deleted, so its cookie opens nothing any more, wherever it was copied."""
    token = session.get("sid")
    if isinstance(token, str):
        db_session.execute(delete(ConsoleSession).where(ConsoleSession.token_hash == hash_secret(token)))
    session.clear()


def require_operator(database: Database):
    """The console's guard (a request hook): without a live operator session a page redirects to
    the login form and anything else is 401; every POST needs its CSRF token.

    :raise 401: a POST (or any other method) without a session.
    :raise 400: a POST without the session's CSRF token.
    """
    if request.endpoint in ("console.static", "console.login"):
        if request.method == "POST":
            check_csrf()
        return None
    token = session.get("sid")
    name = None
    if isinstance(token, str):
        with database.begin() as db_session:
            name = operator_of_session(db_session=db_session, token=token)
    if name is None:
        if request.method == "GET":
            return redirect(url_for("console.login", next=request.full_path.rstrip("?")))
        abort(401, "Log in to the console first.")
    g.operator = name
    if request.method == "POST":
        check_csrf()
    return None


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a console path given by the login link, never another site."""
    if (target and target.startswith("/console") and not target.startswith("//") and "\\" not in target
            and target.isprintable()):  # no CR, LF or other control character reaches a header
        return target
    return url_for("console.overview")


def refuse_nul() -> None:
    """:raise 400: a query or form value holds a NUL, which no text column can take (a 500 otherwise)."""
    for values in (request.args, request.form):
        if any("\x00" in value for value in values.values()):
            abort(400, "A field of this request holds a NUL character.")


def add_security_headers(response):
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response
