"""The client's generated resources (idempotent_pair_client.resources) agree with the document
platform_svc serves: each record's fields and types with the object as answered (times as datetimes, closed
vocabularies as Literals), each create body
with the create's required and optional fields, each update body with the PATCH's. (cluster_svc's:
tests/cluster_svc/test_client_resources.py, with :func:`assert_generated_as_served`.)"""
from __future__ import annotations

import typing
from datetime import datetime

import pytest
from idempotent_pair_client import resources

from platform_svc.models import RESOURCES

JSON_TYPES = {"integer": int, "string": str, "boolean": bool}


@pytest.fixture(scope="module")
def components(app):
    return app.test_client().get("/openapi.json").get_json()["components"]["schemas"]


def expected_type(schema: dict) -> object:
    """The Python type a caller should hold a value of this schema as: a time a datetime, a closed
    vocabulary (``enum``) its Literal."""
    json_type, nullable = schema["type"], schema.get("nullable", False)
    if isinstance(json_type, list):  # ["string", "null"]
        [json_type], nullable = [t for t in json_type if t != "null"], True
    if "enum" in schema:
        base = typing.Literal[tuple(value for value in schema["enum"] if value is not None)]
    else:
        base = datetime if schema.get("format") == "date-time" else JSON_TYPES[json_type]
    return base | None if nullable else base


def assert_generated_as_served(components: dict, resource, *, prefix: str, update_role: str, mixin: type) -> None:
    name = resource.declaration.camel
    record = getattr(resources, prefix + name)
    create, update = getattr(resources, f"{prefix}{name}Create"), getattr(resources, f"{prefix}{name}Update")
    out, created, updated = (components[f"{name}{role}"] for role in ("Out", "Create", update_role))

    hints = typing.get_type_hints(record)
    fields = {field: hints[field] for field in hints if field not in ("meta", "extra")}
    assert fields == {field: expected_type(schema) for field, schema in out["properties"].items()}
    assert create.__required_keys__ == frozenset(created.get("required", ()))
    assert create.__required_keys__ | create.__optional_keys__ == frozenset(created["properties"])
    sent = frozenset(updated["properties"]) - {"generation"}  # cluster_svc's PUT: the generation goes beside
    assert update.__required_keys__ | update.__optional_keys__ == sent
    assert update.__required_keys__ == frozenset(updated.get("required", ())) - {"generation"}
    assert hasattr(mixin, resource.plural)  # every collection has an accessor, by its plural name


@pytest.mark.parametrize("resource", list(RESOURCES), ids=lambda r: r.key)
def test_each_generated_resource_matches_the_served_document(resource, components):
    assert_generated_as_served(components, resource, prefix="", update_role="Patch",
                               mixin=resources.PlatformResources)
