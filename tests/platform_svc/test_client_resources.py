"""The client's generated resources (idempotent_pair_client.resources) agree with the document
platform_svc serves: each record's fields and types with the object as answered, each create body
with the create's required and optional fields, each update body with the PATCH's."""
from __future__ import annotations

import typing

import pytest
from idempotent_pair_client import resources

from platform_svc.models import RESOURCES

JSON_TYPES = {"integer": int, "string": str, "boolean": bool}


@pytest.fixture(scope="module")
def components(app):
    return app.test_client().get("/openapi.json").get_json()["components"]["schemas"]


def expected_type(schema: dict) -> object:
    json_type = schema["type"]
    if isinstance(json_type, list):  # ["string", "null"]
        [json_type] = [t for t in json_type if t != "null"]
        return JSON_TYPES[json_type] | None
    return JSON_TYPES[json_type] | None if schema.get("nullable") else JSON_TYPES[json_type]


@pytest.mark.parametrize("resource", list(RESOURCES), ids=lambda r: r.key)
def test_each_generated_resource_matches_the_served_document(resource, components):
    name = resource.declaration.camel
    record = getattr(resources, name)
    create, update = getattr(resources, f"{name}Create"), getattr(resources, f"{name}Update")
    out, created, patched = (components[f"{name}{role}"] for role in ("Out", "Create", "Patch"))

    hints = typing.get_type_hints(record)
    fields = {field: hints[field] for field in hints if field not in ("meta", "extra")}
    assert fields == {field: expected_type(schema) for field, schema in out["properties"].items()}
    assert create.__required_keys__ == frozenset(created.get("required", ()))
    assert create.__required_keys__ | create.__optional_keys__ == frozenset(created["properties"])
    assert update.__optional_keys__ == frozenset(patched["properties"]) and not update.__required_keys__
    accessor = getattr(resources.PlatformResources, resource.plural)
    assert accessor is not None  # every collection has one, by its plural name
