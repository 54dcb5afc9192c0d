"""What a caller of the client writes, with every accessor by name: mypy --strict passes on it."""
from idempotent_pair_client import Conflict, NoAnswer, PlatformClient
from idempotent_pair_client.aio import AsyncPlatformClient
from idempotent_pair_client.resources import Cluster, ClusterCreate, FirewallRule


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
