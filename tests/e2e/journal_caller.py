"""A caller program for tests/e2e/test_journal_crashes.py: it completes what its journal holds
unanswered, then makes operations ``op-0`` ... ``op-<N-1>`` (a cluster each), skipping those
answered before; killed at any moment, it is started again until it prints ``done``.

    python -m tests.e2e.journal_caller URL API_KEY JOURNAL N
"""
from __future__ import annotations

import sys

from idempotent_pair_client import Journal, PlatformClient


def main(url: str, api_key: str, journal_path: str, operations: int) -> None:
    journal = Journal(journal_path)
    with PlatformClient(url, api_key=api_key, journal=journal, timeout=5.0, retry_for=30.0) as api:
        api.resume()
        for n in range(operations):
            begun = journal.get(f"op-{n}")
            if begun is not None and begun.status is not None:
                continue
            body = {"name": f"journaled-{n}", "region": "eu-west-1", "postgres_version": 16, "plan": "hobby-0",
                    "storage_gb": 10}
            api.create("/v1/clusters", body, operation=f"op-{n}")
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
