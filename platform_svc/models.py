"""platform_svc's tables: accounts, and the public objects with their sync state,
registered in :data:`RESOURCES` as each model naming its declaration
(``declares=``, see :mod:`shared.declaration`) is defined.

Each object row is its own replay log. ``generation`` is the version the
platform wants downstream and ``synced_generation`` the one cluster_svc has
confirmed (0: not created there yet); a deleted row wants its delete confirmed.
``sync_state`` is derived from those columns by PostgreSQL itself, so the
reconciler's work list ("pending") can never disagree with the generations.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

from platform_svc.states import STATE_SQL, SyncState, is_state
from shared import contract
from shared.db import NAMING_CONVENTION
from shared.declaration import Declaration
from shared.registry import Registry, declared_columns, registering

# For the create-or-return mechanism: the platform invents every ID, so what a
# replay (same Idempotency-Key) must repeat is the body it first came with.
KEY_REPLAY = ("request_fingerprint",)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Public requests per second this account may make; NULL: the default (ACCOUNT_RATE_LIMIT).
    rate_limit: Mapped[int | None] = mapped_column(Integer)


class ApiKey(Base):
    """One of an account's API keys (an account may hold several: a new one is issued before
    the old one is revoked). A key is "<key_id>.<secret>": the id finds the row, and the
    secret's SHA-256 must match. The secret itself is never stored."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    account_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("accounts.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Written at most once a minute per key (platform_svc.api.auth), not on every request.
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A revoked key is kept, for list-keys to show, and never authenticates again.
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class RateWindow(Base):
    """How many public requests an account made in its current one-second window.

    UNLOGGED: a counter that lives a second needs no durability, and a
    transaction that writes only unlogged tables commits without waiting for a
    WAL flush (or a synchronous standby), so counting a request costs no disk
    write. A crash or a failover empties the table: every window starts afresh.
    No foreign key, so counting takes no lock on the account's row.
    """

    __tablename__ = "rate_windows"
    __table_args__ = {"prefixes": ["UNLOGGED"]}

    account_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    used: Mapped[int] = mapped_column(Integer)


class KeyChanges(Base):
    """One row whose ``generation`` every change to who may call raises: a key added, revoked or
    removed, an account's limit changed or the account removed (statement-level triggers,
    migration 0008). Each web worker reads it every 0.25 s and re-reads the keys it holds when
    it moved (:mod:`platform_svc.api.admission`); ``last_used_at`` writes raise nothing."""

    __tablename__ = "key_changes"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)


class Synced:
    """Columns of every object the platform pushes down to cluster_svc."""

    account_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("accounts.id"))
    generation: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    synced_generation: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delete_synced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sync_state: Mapped[str] = mapped_column(String(7), Computed(STATE_SQL, persisted=True))
    synced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sync_error: Mapped[str | None] = mapped_column(Text)
    sync_failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Closed by a person without being pushed (``platform-svc abandon``): deleted on the platform,
    # its ID retired, and the copy under that ID in cluster_svc (another team's) never touched.
    abandoned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Replay bookkeeping: transient failures so far, when the next try is due,
    # and until when a pusher holds the row (so no two push it at once).
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The public Idempotency-Key, on the object's own row, with a fingerprint
    # of the request body it came with.
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    @declared_attr.directive
    def __table_args__(cls):
        return (
            UniqueConstraint("account_id", "idempotency_key"),
            # The reconciler's work list; sync-status and the sync_rows gauge count pending rows with it.
            Index(f"ix_{cls.__tablename__}_due", "next_attempt_at", postgresql_where=text(is_state(SyncState.PENDING))),
            # Failed rows, oldest failure first (sync-status, the sync_rows gauge): few, never a table scan.
            Index(f"ix_{cls.__tablename__}_failed", "sync_failed_at", postgresql_where=text(is_state(SyncState.FAILED))),
            # Deleted rows in (deleted_at, id) order: what purge walks, never the table.
            Index(f"ix_{cls.__tablename__}_deleted", "deleted_at", "id", postgresql_where=text("deleted_at IS NOT NULL")),
            # Abandoned rows (a shown state of their own): counted apart from the synced ones through it.
            Index(f"ix_{cls.__tablename__}_abandoned", "abandoned_at", postgresql_where=text("abandoned_at IS NOT NULL")),
        )


# What platform_svc adds to a declared resource's table: the ID it invents and the sync bookkeeping.
RESOURCES = Registry(columns=lambda declaration: ("id", *Synced.__annotations__), immutable=lambda _: KEY_REPLAY)


def _model_columns(declaration: Declaration) -> dict[str, Any]:
    """The declared columns: a platform row always holds every field."""
    return declared_columns(declaration, nullable=False, index_parent=True)


class Object(registering(RESOURCES, columns=_model_columns), Synced, Base):
    """The base of every model of a declared resource (``declares=``): its table, ID, ancestors'
    IDs and fields are derived from the declaration, the sync bookkeeping is :class:`Synced`'s."""

    __abstract__ = True


class Cluster(Object, declares=contract.CLUSTER):
    pass


class FirewallRule(Object, declares=contract.FIREWALL_RULE):
    pass


class Lease(Base):
    """A lease at most one process holds at a time, by name (``repair``: the reconciler that runs the
    periodic passes; see :class:`platform_svc.operations.leadership.Leadership`). Taken and renewed on the database's
    clock: ``expires_at`` is set from its ``now()``, never from a process's."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    holder: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# The operator's console (platform_svc.console) ----------------------------------------


class Operator(Base):
    """A person allowed into the console: a name and the SHA-256 of a one-time secret, as an API key's.

    Neither an account's API key nor the internal token: ``platform-svc create-operator``
    makes (or replaces) one. A new secret gets a new ``id``, and a console session names
    the ``id`` it was opened with, so replacing or revoking an operator ends its sessions.
    """

    __tablename__ = "operators"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)  # what a login looks up (console.auth)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ConsoleKey(Base):
    """The secrets platform_svc's processes share, each made once by the first process that needs it
    and read by every other (workers and replicas agree without a setting): ``session``, the key
    console session cookies are signed with (deleting the row and restarting the services ends
    every session), and ``key_ids``, the one that marks the API key ids it issues
    (:mod:`platform_svc.api.key_ids`)."""

    __tablename__ = "console_keys"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    secret: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ConsoleSession(Base):
    """A logged-in console session: the cookie holds a random token, this row its SHA-256. Logout
    deletes the row, so a copied cookie opens nothing after it; a session lasts 8 hours from login
    at most, and ends after 30 minutes without a page (platform_svc.console.auth)."""

    __tablename__ = "console_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    operator_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("operators.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class LoginFailures(Base):
    """Refused console logins counted per operator name and per source address (``key``), shared
    by every worker and replica: past a few, that name or source is locked out for a while."""

    __tablename__ = "console_login_failures"

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    first_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Pass(Base):
    """The last pass of each kind (``reconcile``, ``repair``, ``purge``): when it ended, who ran it,
    and its summary line. One row per kind, overwritten: what the console's overview shows."""

    __tablename__ = "passes"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    holder: Mapped[str] = mapped_column(Text)
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    summary: Mapped[str] = mapped_column(Text)


class Sighting(Base):
    """Whether cluster_svc served this process's last call (``served``), what that call and its
    answer were, when it was seen, and since when it has been so: one row per process
    (:mod:`platform_svc.operations.sightings`), what the console's overview shows across processes."""

    __tablename__ = "cluster_svc_sightings"

    observer: Mapped[str] = mapped_column(Text, primary_key=True)  # host:pid
    role: Mapped[str] = mapped_column(Text)  # web or reconciler
    served: Mapped[bool] = mapped_column(Boolean)
    what: Mapped[str] = mapped_column(Text)
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class RepairRun(Base):
    """A repair pass started from the console, with its progress: objects compared so far out of
    ``total`` (the synced rows when it started), and the findings so far. Kept in the database so a
    person can leave the page and come back, from any worker or replica."""

    __tablename__ = "repair_runs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dry_run: Mapped[bool] = mapped_column(Boolean)
    operator: Mapped[str] = mapped_column(Text)
    holder: Mapped[str | None] = mapped_column(Text)  # the process running it; None: asked for, not yet claimed
    total: Mapped[int] = mapped_column(Integer)
    compared: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    findings: Mapped[list] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    summary: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
