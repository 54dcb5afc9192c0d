"""What the model of tests/chaos/test_model.py acts on: one real pair, the operator's commands,
cluster_svc's database edited by hand, and both databases read back.

One :class:`World` serves every example the model runs: a pair of real processes
(:class:`tooling.pair.Pair`, one gunicorn worker each, so the inline push has one
circuit breaker), the commands run as a user runs them (:class:`tooling.commands.Commands`:
each in a process of its own, forked from one that has them imported, a tenth of a second
instead of two), and the databases read and edited directly. An example is cheap: a new
account, new IDs; nothing is restarted.
"""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any

import requests
from sqlalchemy import text

from tooling.commands import Commands
from tooling.pair import Pair, PublicApi

CLUSTERS, RULES = "clusters", "firewall_rules"  # the tables, the same on both sides
Key = tuple[str, str]  # (table, id): one object on either side


class World:
    """The pair and what the model does to it besides the public API."""

    def __init__(self, pair: Pair, commands: Commands) -> None:
        self.pair = pair
        self.commands = commands
        self.frozen = False

    # -- callers -----------------------------------------------------------------------------

    def account(self, name: str) -> PublicApi:
        return self.pair.account(name, cli=False)

    def internal(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.pair.internal(method, path, **kwargs)

    # -- processes and commands ----------------------------------------------------------------

    def freeze(self) -> None:
        """cluster_svc's master and worker stopped (SIGSTOP): connections are accepted, nothing answers."""
        os.killpg(self.pair.cluster_svc.process.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        """cluster_svc running again, and answering: what was sent to it meanwhile is served now."""
        os.killpg(self.pair.cluster_svc.process.pid, signal.SIGCONT)
        self.frozen = False
        self.pair.cluster_svc.wait_healthy(timeout=30)

    def platform_svc(self, *args: str) -> subprocess.CompletedProcess:
        """``platform-svc ARGS`` with the pair's settings."""
        return self.commands.run("platform-svc", *args, env={**os.environ, **self.pair.platform_env})

    def cluster_svc(self, *args: str) -> subprocess.CompletedProcess:
        """``cluster-svc ARGS`` with the pair's settings."""
        return self.commands.run("cluster-svc", *args, env={**os.environ, **self.pair.cluster_env})

    # -- the databases -------------------------------------------------------------------------

    def platform_rows(self, account_id: str) -> dict[Key, dict]:
        """The account's objects in the platform's database."""
        rows: dict[Key, dict] = {}
        with self.pair.platform_engine.connect() as conn:
            for table in (CLUSTERS, RULES):
                found = conn.execute(text(f"SELECT * FROM {table} WHERE account_id = :a"), {"a": account_id})
                rows.update({(table, str(row["id"])): dict(row) for row in found.mappings()})
        return rows

    def cluster_rows(self, keys: Iterable[Key]) -> dict[Key, dict]:
        """cluster_svc's rows of these objects (those it holds), and of every cluster its rules lie under."""
        wanted = {table: [uuid.UUID(i) for t, i in keys if t == table] for table in (CLUSTERS, RULES)}
        rows: dict[Key, dict] = {}
        with self.pair.cluster_engine.connect() as conn:
            rules = conn.execute(text(f"SELECT * FROM {RULES} WHERE id = ANY(:ids)"), {"ids": wanted[RULES]})
            rows.update({(RULES, str(row["id"])): dict(row) for row in rules.mappings()})
            parents = {row["cluster_id"] for row in rows.values()}
            clusters = conn.execute(
                text(f"SELECT * FROM {CLUSTERS} WHERE id = ANY(:ids)"), {"ids": [*wanted[CLUSTERS], *parents]}
            )
            rows.update({(CLUSTERS, str(row["id"])): dict(row) for row in clusters.mappings()})
        return rows

    def rules_under(self, cluster_id: str) -> list[Key]:
        """cluster_svc's rules under this cluster, alive or not."""
        with self.pair.cluster_engine.connect() as conn:
            found = conn.execute(text(f"SELECT id FROM {RULES} WHERE cluster_id = :c"), {"c": cluster_id})
            return [(RULES, str(row_id)) for row_id in found.scalars()]

    @contextmanager
    def editing(self):
        """One transaction on cluster_svc's database, as a person with psql has it."""
        with self.pair.cluster_engine.begin() as conn:
            yield conn

    def delete_copy(self, key: Key) -> None:
        """Turn cluster_svc's copy into a tombstone, with its rules, as its own DELETE would."""
        table, object_id = key
        with self.editing() as conn:
            conn.execute(text(f"UPDATE {table} SET deleted_at = now() WHERE id = :id AND deleted_at IS NULL"),
                         {"id": object_id})
            if table == CLUSTERS:
                conn.execute(text(f"UPDATE {RULES} SET deleted_at = now() WHERE cluster_id = :id"
                                  " AND deleted_at IS NULL"), {"id": object_id})

    def set_columns(self, key: Key, values: dict[str, Any], generations: int = 0) -> None:
        """Edit columns of cluster_svc's copy, moving its generation by ``generations`` (never below 1)."""
        table, object_id = key
        assignments = ", ".join(f"{column} = :v_{column}" for column in values)
        with self.editing() as conn:
            conn.execute(
                text(f"UPDATE {table} SET {assignments}, generation = greatest(1, generation + :n) WHERE id = :id"),
                {**{f"v_{column}": value for column, value in values.items()}, "n": generations, "id": object_id},
            )

    def put_back(self, key: Key, copy: dict) -> None:
        """cluster_svc's copy as it was (an older backup of this one row)."""
        table, object_id = key
        columns = [column for column in copy if column != "id"]
        assignments = ", ".join(f"{column} = :{column}" for column in columns)
        with self.editing() as conn:
            conn.execute(text(f"UPDATE {table} SET {assignments} WHERE id = :id"), {**copy, "id": object_id})

    def remove_row(self, key: Key) -> None:
        """The row gone from cluster_svc's database (a cluster's rules with it: they name it)."""
        table, object_id = key
        with self.editing() as conn:
            if table == CLUSTERS:
                conn.execute(text(f"DELETE FROM {RULES} WHERE cluster_id = :id"), {"id": object_id})
            conn.execute(text(f"DELETE FROM {table} WHERE id = :id"), {"id": object_id})

