"""A caller with a misspelt field in a body and in a record: mypy --strict refuses it."""
from idempotent_pair_client import ClusterClient, PlatformClient


def grow(api: PlatformClient, cluster_id: str) -> int:
    db = api.clusters.get(cluster_id)
    api.clusters.update(cluster_id, {"storage_gbs": 20})
    return db.storage_gb_total


def move(internal: ClusterClient, cluster_id: str) -> None:
    internal.clusters.update(cluster_id, {"name": "x", "plan": "hobby-0"}, generation=3)  # storage_gb left out
