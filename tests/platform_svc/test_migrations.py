"""The schema platform_svc's migrations build is the schema its models describe."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from platform_svc.models import Base


def test_migrated_schema_matches_the_models(platform_db_url):
    engine = create_engine(platform_db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()

    assert diff == []
