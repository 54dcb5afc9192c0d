"""What a caller of the client writes, with every accessor by name: mypy --strict passes on it."""
from idempotent_pair_client import ClusterClient, Conflict, NoAnswer, PlatformClient
from idempotent_pair_client.aio import AsyncPlatformClient
from idempotent_pair_client.resources import Cluster, ClusterCreate, FirewallRule, InternalCluster


def provision(api: PlatformClient) -> tuple[Cluster, FirewallRule]:
    body: ClusterCreate = {"name": "main-db", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2",
                           "storage_gb": 100}
    db = api.clusters.create(body, idempotency_key=api.new_idempotency_key(), timeout=5.0)
    assert db.meta is not None and db.meta.status in (200, 201)
    same: Cluster = api.clusters.get(db.id)
    grown = api.clusters.update(db.id, {"storage_gb": same.storage_gb + 10}, retry_for=10.0)
    names = [c.name for c in api.clusters.list(limit=50)]
    rules = api.firewall_rules(db.id)
    rule = rules.create({"cidr": "10.0.0.0/8"})
    rules.update(rule.id, {"description": "office"})
    found = rules.find_by_idempotency_key("k")
    print(names, grown.generation, found and found.cidr, [r.cidr for r in rules.list()])
    try:
        rules.delete(rule.id)
    except (Conflict, NoAnswer) as failed:
        print(failed.args)
    print(api.clusters.delete(db.id).outcome.value)
    return db, rule


async def provision_async(api: AsyncPlatformClient) -> Cluster:
    db = await api.clusters.create({"name": "main-db", "region": "eu-west-1", "postgres_version": 16,
                                    "plan": "standard-2", "storage_gb": 100})
    rules = api.firewall_rules(db.id)
    rule: FirewallRule = await rules.create({"cidr": "10.0.0.0/8"})
    print([r.cidr async for r in rules.list()], rule.description, (await api.clusters.get(db.id)).plan)
    await api.clusters.update(db.id, {"plan": "memory-8"})
    print((await rules.delete(rule.id)).outcome, await rules.find_by_idempotency_key("k"))
    return db


def mirror(internal: ClusterClient, team_id: str, object_id: str) -> InternalCluster:
    made = internal.clusters.create({"id": object_id, "team_id": team_id, "name": "main-db", "region": "eu-west-1",
                                     "postgres_version": 16, "plan": "standard-2", "storage_gb": 100})
    internal.clusters.update(made.id, {"name": "main-db", "plan": "memory-8", "storage_gb": 100}, generation=2)
    rules = internal.firewall_rules(made.id)
    rule = rules.create({"id": object_id, "cidr": "10.0.0.0/8", "description": ""})
    print(rule.cidr, [c.team_id for c in internal.clusters.list(limit=10)], internal.clusters.get(made.id).plan)
    print(rules.delete(rule.id, unknown="refuse").outcome)
    return made
