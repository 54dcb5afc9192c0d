"""The client's generated internal resources (idempotent_pair_client.resources, ``Internal...``)
agree with the document cluster_svc serves (as platform_svc's do: tests/platform_svc/test_client_resources.py)."""
from __future__ import annotations

import pytest
from idempotent_pair_client import resources

from cluster_svc.models import RESOURCES
from tests.platform_svc.test_client_resources import assert_generated_as_served


@pytest.fixture(scope="module")
def components(app):
    return app.test_client().get("/openapi.json").get_json()["components"]["schemas"]


@pytest.mark.parametrize("resource", list(RESOURCES), ids=lambda r: r.key)
def test_each_generated_internal_resource_matches_the_served_document(resource, components):
    assert_generated_as_served(components, resource, prefix="Internal", update_role="Update",
                               mixin=resources.ClusterResources)
