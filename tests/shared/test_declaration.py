"""A resource is declared once (shared.contract), and each service derives its bodies from it:
the two registries cannot disagree, and a model that disagrees with its declaration stops the
service before it serves anything."""
from __future__ import annotations

import os
import subprocess
import uuid
from collections import defaultdict

import pytest
from marshmallow import ValidationError, fields
from sqlalchemy import CheckConstraint, Integer, MetaData, String, Uuid
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import cluster_svc.models as cluster_models
import platform_svc.models as platform_models
from cluster_svc.schemas import route_schemas as cluster_schemas
from platform_svc.push import content
from platform_svc.schemas import route_schemas as public_schemas
from shared.declaration import INTEGER, Declaration, DeclarationMismatch, Field, varchar
from shared.registry import Registry, registering
from tooling.testing import ROOT, console_script

PAIRS = list(zip(cluster_models.RESOURCES, platform_models.RESOURCES, strict=True))
IDS = [cluster.key for cluster, _ in PAIRS]


def test_both_services_hold_the_same_resources_in_the_same_tree():
    assert [r.key for r in cluster_models.RESOURCES] == [r.key for r in platform_models.RESOURCES] == IDS
    for cluster, platform in PAIRS:
        assert cluster.declaration is platform.declaration
        assert (cluster.parent and cluster.parent.key) == (platform.parent and platform.parent.key)
        assert cluster.scope_columns == platform.scope_columns
        assert cluster.item_path() == platform.item_path()


@pytest.mark.parametrize(("cluster", "platform"), PAIRS, ids=IDS)
def test_what_the_platform_pushes_is_exactly_what_cluster_svc_takes(cluster, platform):
    """A field one side has and the other lacks would be a 422 downstream: a row failed for good."""
    row = defaultdict(lambda: None, id=uuid.uuid4(), account_id=uuid.uuid4(), generation=3)
    created = set(content.create_body(platform, row))
    updated = set(content.update_body(platform, row))

    assert created == set(cluster_schemas(cluster)["create"]().fields)
    assert updated == set(cluster_schemas(cluster)["update"]().fields)
    # The public bodies are those less what the platform owns (the ID, the owner and the generation).
    assert set(public_schemas(platform)["create"]().fields) == created - {"id", "generation", cluster.declaration.owner}
    assert set(public_schemas(platform)["patch"]().fields) == updated - {"generation"}


@pytest.mark.parametrize(("cluster", "platform"), PAIRS, ids=IDS)
def test_every_declared_field_is_a_column_on_both_sides_and_an_output_field(cluster, platform):
    for name in cluster.declaration.fields:
        assert name in cluster.table.c and name in platform.table.c
        assert name in cluster_schemas(cluster)["out"]().fields and name in public_schemas(platform)["out"]().fields


def test_a_replay_must_repeat_the_owner_or_the_parent_and_the_immutable_fields():
    cluster, rule = cluster_models.RESOURCES["cluster"], cluster_models.RESOURCES["firewall_rule"]
    assert cluster.immutable == ("team_id", "region", "postgres_version")
    assert rule.immutable == ("cluster_id", "cidr")


def registry_and_base():
    registry = Registry(columns=lambda declaration: ("id",), immutable=lambda declaration: ())

    class Base(registering(registry, columns=lambda declaration: {}), DeclarativeBase):  # nothing derived
        metadata = MetaData()

    return registry, Base


THING = Declaration(
    "thing", owner="team_id", fields={"label": Field(fields.String, varchar(20)), "size": Field(fields.Integer, INTEGER)}
)


def test_a_model_missing_a_declared_field_is_refused_naming_it():
    registry, Base = registry_and_base()
    with pytest.raises(DeclarationMismatch, match="no column for the field 'size'"):

        class Thing(Base, declares=THING):
            __tablename__ = "things"
            id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
            label: Mapped[str] = mapped_column(String(20))

    assert "thing" not in registry


def test_a_column_no_field_declares_is_refused_naming_it():
    registry, Base = registry_and_base()
    with pytest.raises(DeclarationMismatch, match=r"things\.colour is not a field"):

        class Thing(Base, declares=THING):
            __tablename__ = "things"
            id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
            label: Mapped[str] = mapped_column(String(20))
            size: Mapped[int] = mapped_column()
            colour: Mapped[str] = mapped_column(String)


@pytest.mark.parametrize("stored_as", [String(21), String(), Integer()], ids=["longer", "unbounded", "integer"])
def test_a_column_of_another_type_or_length_than_declared_is_refused_naming_both(stored_as):
    registry, Base = registry_and_base()
    with pytest.raises(DeclarationMismatch, match=r"things\.label is .*, where 'thing' declares varchar\(20\)"):

        class Thing(Base, declares=THING):
            __tablename__ = "things"
            id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
            label: Mapped[str] = mapped_column(stored_as)
            size: Mapped[int] = mapped_column()


def test_a_text_field_without_a_validator_of_its_own_is_held_to_its_column_length():
    spec = Field(fields.String, varchar(20))
    with pytest.raises(ValidationError):
        spec.loader(required=True, default=False).deserialize("x" * 21)
    assert spec.loader(required=True, default=False).deserialize("x" * 20) == "x" * 20


def test_a_services_model_of_a_declaration_is_derived_from_it_whole():
    """A model names its declaration and nothing else: its table, columns (type, length and
    nullability the service's), ancestors' keys, CHECK and tombstones' index follow from it."""
    cluster_table, platform_table = cluster_models.RESOURCES["firewall_rule"].table, platform_models.RESOURCES[
        "firewall_rule"].table
    for table in (cluster_table, platform_table):
        assert table.name == "firewall_rules"
        assert str(table.c.description.type) == "VARCHAR(255)" and str(table.c.cidr.type) == "CIDR"
        assert [fk.target_fullname for fk in table.c.cluster_id.foreign_keys] == ["clusters.id"]
    assert cluster_table.c.cidr.nullable and not platform_table.c.cidr.nullable  # a tombstone holds no fields
    checks = {c.name: str(c.sqltext) for c in cluster_table.constraints if isinstance(c, CheckConstraint)}
    assert checks["ck_firewall_rules_live_rows_complete"] == "deleted_at IS NOT NULL OR cidr IS NOT NULL"
    assert "ix_firewall_rules_deleted" in {index.name for index in cluster_table.indexes}


def test_a_model_that_agrees_is_registered_with_what_it_declares():
    registry, Base = registry_and_base()

    class Thing(Base, declares=THING):
        __tablename__ = "things"
        id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
        label: Mapped[str] = mapped_column(String(20))
        size: Mapped[int] = mapped_column()

    assert registry["thing"].declaration is THING and registry["thing"].table is Thing.__table__


def test_only_a_root_names_an_owner():
    with pytest.raises(ValueError, match="owner"):
        Declaration("orphan", fields={})
    with pytest.raises(ValueError, match="owner"):
        Declaration("child", parent=THING, owner="team_id", fields={})


@pytest.mark.parametrize("command", [["cluster-svc", "serve"], ["cluster-svc", "migrate"]])
def test_a_service_whose_model_disagrees_with_its_declaration_refuses_to_start(command):
    env = {**os.environ, "RESOURCE_MODULES": "tests.shared.declared.mismatched", "PYTHONPATH": str(ROOT),
           "CLUSTER_DATABASE_URL": "x", "INTERNAL_TOKEN": "t"}
    done = subprocess.run([console_script(command[0]), *command[1:]], env=env, capture_output=True, text=True,
                          timeout=60)

    assert done.returncode == 2
    assert done.stderr.strip() == (
        "cluster-svc: the column tags.label is varchar(10), where 'tag' declares varchar(40)"
        " (change the model and a migration, or the declaration)"
    )
