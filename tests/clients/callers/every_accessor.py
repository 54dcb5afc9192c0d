"""What a caller of the client writes, with every accessor by name and everything imported from the
package root (but the asyncio twins): mypy --strict passes on it."""
from datetime import datetime, timedelta

from idempotent_pair_client import (
    Cluster,
    ClusterClient,
    ClusterCreate,
    Conflict,
    FirewallRule,
    IdempotencyStatus,
    InternalCluster,
    NoAnswer,
    Page,
    PlatformClient,
    Region,
    SyncState,
)
from idempotent_pair_client.aio import AsyncPlatformClient  # the asyncio twins need httpx: their own module


def provision(api: PlatformClient, region: Region) -> tuple[Cluster, FirewallRule]:
    body: ClusterCreate = {"name": "main-db", "region": region, "postgres_version": 16, "plan": "standard-2",
                           "storage_gb": 100}
    db = api.clusters.create(body, idempotency_key=api.new_idempotency_key(), timeout=5.0, wait=10)
    status: int = db.meta.status  # a record a call answered always has its meta
    done: IdempotencyStatus | None = db.meta.idempotency_status
    state: SyncState = db.sync_state
    age: timedelta = datetime.now(db.created_at.tzinfo) - db.created_at
    print(status, done, state, age, db.meta.rate_limit.remaining)
    same: Cluster = api.clusters.get(db.id)
    grown = api.clusters.update(db.id, {"storage_gb": same.storage_gb + 10}, retry_for=10.0)
    first: Page[Cluster] = api.clusters.list(limit=50, timeout=2.0, retry_for=5.0)
    print([c.name for c in first.data], first.has_more, first.next_after, first.meta.request_id)
    names = [c.name for c in first]  # every page
    rules = api.firewall_rules(db.id)
    rule = rules.create({"cidr": "10.0.0.0/8"}, operation="order-1234")
    rules.update(rule.id, {"description": "office"}, wait=5)
    found = rules.find_by_idempotency_key("k", timeout=2.0, retry_for=5.0)
    print(names, grown.generation, found and found.cidr, [r.cidr for r in rules.list()])
    try:
        rules.delete(rule.id)
    except (Conflict, NoAnswer) as failed:
        print(failed.args)
    print(api.clusters.delete(db.id).outcome.value, grown.synced_at and grown.synced_at.isoformat())
    return db, rule


async def provision_async(api: AsyncPlatformClient) -> Cluster:
    db = await api.clusters.create({"name": "main-db", "region": "eu-west-1", "postgres_version": 16,
                                    "plan": "standard-2", "storage_gb": 100})
    rules = api.firewall_rules(db.id)
    rule: FirewallRule = await rules.create({"cidr": "10.0.0.0/8"})
    page = await rules.list(limit=10)
    print([r.cidr async for r in rules.list()], page.data, page.has_more, rule.description,
          (await api.clusters.get(db.id)).plan)
    await api.clusters.update(db.id, {"plan": "memory-8"})
    print((await rules.delete(rule.id)).outcome, await rules.find_by_idempotency_key("k"))
    return db


def mirror(internal: ClusterClient, team_id: str, object_id: str) -> InternalCluster:
    made = internal.clusters.create({"id": object_id, "team_id": team_id, "name": "main-db", "region": "eu-west-1",
                                     "postgres_version": 16, "plan": "standard-2", "storage_gb": 100})
    internal.clusters.update(made.id, {"name": "main-db", "plan": "memory-8", "storage_gb": 100}, generation=2)
    rules = internal.firewall_rules(made.id)
    rule = rules.create({"id": object_id, "cidr": "10.0.0.0/8", "description": ""})
    print(rule.cidr, [c.team_id for c in internal.clusters.list(limit=10, team_id=team_id)],
          internal.clusters.get(made.id).plan)
    print(rules.delete(rule.id, unknown="refuse").outcome)
    return made
