"""The schema the migrations build is the schema the models describe."""
from __future__ import annotations

from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from cluster_svc.models import Base
from tooling.testing import schema_drift


def test_migrated_schema_matches_the_models(cluster_db_url):
    assert schema_drift(cluster_db_url, Base.metadata) == []


def test_migrations_reach_head_and_create_both_tables(cluster_db_url):
    engine = create_engine(cluster_db_url)
    try:
        with engine.connect() as conn:
            revision = MigrationContext.configure(conn).get_current_revision()
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()

    assert revision is not None
    assert {"clusters", "firewall_rules", "alembic_version"} <= tables
