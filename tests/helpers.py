"""The helpers every test package imports (fixtures stay in the conftest modules): bodies of
each API, and what the unit tests of platform_svc call it with. Waiting for a condition is
:func:`tooling.testing.wait_for`, which the tooling uses too."""
from __future__ import annotations

import asyncio
import inspect
import threading
import time
import uuid
from typing import Any

# What every public body holds unless a test says otherwise; cluster_svc's add the caller's IDs.
PUBLIC_CLUSTER = {"name": "main-db", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2",
                  "storage_gb": 100}
PUBLIC_RULE = {"cidr": "10.0.0.0/8", "description": "office"}

UNREACHED_RATE_LIMIT = 1_000_000  # an account's limit no test reaches


def cluster_body(**overrides: Any) -> dict[str, Any]:
    """platform_svc's public create body of a cluster."""
    return {**PUBLIC_CLUSTER, **overrides}


def rule_body(**overrides: Any) -> dict[str, Any]:
    """platform_svc's public create body of a firewall rule."""
    return {**PUBLIC_RULE, **overrides}


def squat_downstream(cluster_svc_url: str, token: str, created: dict[str, Any]) -> None:
    """Another team's cluster created in cluster_svc under the ID of ``created`` (a platform cluster
    not pushed yet, made in eu-west-1): its push then meets an id_conflict."""
    import requests

    squatter = {**cluster_body(region="us-east-1"), "id": created["id"], "team_id": created["id"]}
    answer = requests.post(f"{cluster_svc_url}/v1/clusters", json=squatter,
                           headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert answer.status_code == 201, answer.text


def internal_cluster_body(**overrides: Any) -> dict[str, Any]:
    """cluster_svc's create body of a cluster: the caller's ID and team, new each time."""
    return {"id": str(uuid.uuid4()), "team_id": str(uuid.uuid4()), **PUBLIC_CLUSTER, **overrides}


def internal_rule_body(**overrides: Any) -> dict[str, Any]:
    """cluster_svc's create body of a firewall rule, with a new ID."""
    return {"id": str(uuid.uuid4()), **PUBLIC_RULE, **overrides}


def is_uuid7(value: str) -> bool:
    return uuid.UUID(value).version == 7


def make_account(database: Any, name: str = "acme") -> tuple[uuid.UUID, str]:
    """A new account through platform_svc's service layer; returns ``(account_id, api_key)``."""
    from platform_svc.api import services

    with database.begin() as db_session:
        return services.create_account(db_session=db_session, name=name)


def authed_client(app: Any, api_key: str) -> Any:
    """A Flask test client of ``app`` presenting ``api_key``."""
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {api_key}"
    return client


def with_account(pair: Any, request: Any) -> Any:
    """``pair`` (:class:`tooling.pair.Pair`) calling as (and checking) a new account named after the test."""
    pair.use_account(pair.account(f"e2e {request.node.name}"[:100], cli=False))
    return pair


class ManualClock:
    """A monotonic clock that moves only when told (``step``); pass ``step`` as a ``sleep`` to make
    a wait move it instead of taking time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float) -> None:
        self.now += seconds


class SteppedClock:
    """``time.monotonic()`` plus the steps tests took: it never goes back, so the session's app
    keeps it as its admission clock (a test steps past the refresh period instead of waiting)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def step(self, seconds: float) -> None:
        self.offset += seconds


def keys_reread(app: Any) -> None:
    """Step the app's admission clock past the refresh period: its next request re-reads what
    changed in the keys (as every worker does within that period)."""
    from platform_svc.api.admission import REFRESH_SECONDS

    app.extensions["authenticator"].clock.step(REFRESH_SECONDS)


class Synced:
    """An asyncio client (idempotent_pair_client.aio) driven from sync code, so that one black-box
    test runs against the sync client and its async twin alike: each call runs on this adapter's
    own event loop, in a thread of its own (callable from any thread, as the sync client is)."""

    def __init__(self, client) -> None:
        self.client = client
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="synced-client", daemon=True)
        self.thread.start()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def __getattr__(self, name: str):
        found = getattr(self.client, name)
        if name == "list":  # an AsyncPager: every object, walked
            return lambda *args, **kwargs: iter(self.run(_collect(found(*args, **kwargs))))
        if inspect.iscoroutinefunction(found):
            return lambda *args, **kwargs: self.run(found(*args, **kwargs))
        return found

    def close(self) -> None:
        try:
            self.run(self.client.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def _collect(items) -> list:
    return [item async for item in items]


def drained(pusher):
    """What a reconciler does once with what is due now (``reconcile --once``): the sync states the
    rows it pushed reached."""
    from platform_svc.reconciler.controller import Reconciler
    from platform_svc.reconciler.settings import ReconcilerSettings

    return Reconciler(pusher, ReconcilerSettings(), suspect=False).drain()
