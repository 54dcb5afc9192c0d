"""A caller with a misspelt field in a body, in a record and in a listing's filters, a region out of
the vocabulary, and a time read as text: mypy --strict refuses each."""
from idempotent_pair_client import ClusterClient, PlatformClient


def grow(api: PlatformClient, cluster_id: str) -> int:
    db = api.clusters.get(cluster_id)
    api.clusters.update(cluster_id, {"storage_gbs": 20})
    return db.storage_gb_total


def move(internal: ClusterClient, cluster_id: str) -> None:
    internal.clusters.update(cluster_id, {"name": "x", "plan": "hobby-0"}, generation=3)  # storage_gb left out


def list_two(api: PlatformClient) -> list[str]:
    return [c.id for c in api.clusters.list(limt=2)]


def open_in(api: PlatformClient) -> str:
    made = api.clusters.create({"name": "x", "region": "mars-1", "postgres_version": 16, "plan": "hobby-0",
                                "storage_gb": 10})
    return made.created_at.removesuffix("Z")
