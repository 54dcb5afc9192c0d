"""Reading /metrics the way Prometheus does, with prometheus-client's own parser."""
from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset], float]


def scrape(url: str, token: str | None) -> Samples:
    """Every sample of ``url``'s /metrics, keyed by (name, labels); a fresh connection each time."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = requests.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
    wanted = set(labels.items())
    return sum(v for (n, sample_labels), v in samples.items() if n == name and wanted <= sample_labels)


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset, float]:
    wanted = set(labels.items())
    return {sample_labels: v for (n, sample_labels), v in samples.items() if n == name and wanted <= sample_labels}
