"""The schema platform_svc's migrations build is the schema its models describe."""
from __future__ import annotations

from platform_svc.models import Base
from tooling.testing import schema_drift


def test_migrated_schema_matches_the_models(platform_db_url):
    assert schema_drift(platform_db_url, Base.metadata) == []
