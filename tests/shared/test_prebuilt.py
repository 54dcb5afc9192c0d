"""The hot statements run on the transaction's own psycopg2 cursor
(shared.prebuilt.execute_prebuilt), and a caller cannot tell them from SQLAlchemy's execution: the
same rows, the same errors (their parameters hidden), a connection that died invalidated, the
statement seen by listeners."""
from __future__ import annotations

import ipaddress
import uuid

import pytest
from sqlalchemy import Integer, bindparam, select, text, type_coerce
from sqlalchemy.exc import DataError, OperationalError

import cluster_svc.models
import platform_svc.models
from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.push import recording
from shared.db import Database
from shared.idempotent import _insert_statement, _select_by
from shared.prebuilt import _compiled, execute_prebuilt
from tooling.testing import StatementCounter, fresh_database


@pytest.fixture(scope="module")
def database(pg_server_url):
    database = Database(fresh_database(pg_server_url, "prebuilt", migrations=CLUSTER_MIGRATIONS), pool_size=1)
    yield database
    database.dispose()


def cluster_values(**overrides):
    return {"id": uuid.uuid4(), "team_id": uuid.uuid4(), "name": "main-db", "region": "eu-west-1",
            "postgres_version": 16, "plan": "standard-2", "storage_gb": 100, "generation": 1, **overrides}


def shape(values):
    return tuple((name, None) for name in values)


def resource(registry, table):
    return next(each for each in registry if each.table.name == table)


def test_a_create_and_a_push_recording_take_the_driver_path_and_a_network_column_does_not(database):
    dialect = database.engine.dialect
    clusters = resource(cluster_svc.models.RESOURCES, "clusters")
    public = resource(platform_svc.models.RESOURCES, "clusters")
    rules = resource(cluster_svc.models.RESOURCES, "firewall_rules")

    assert _compiled(_insert_statement(clusters, shape(cluster_values()), ("id",)), dialect) is not None
    assert _compiled(_select_by(clusters, ("id",)), dialect) is not None
    assert _compiled(recording._record_statement(public.table, recording.CONFIRMED), dialect) is not None
    assert _compiled(recording._record_statement(public.table, recording.RETRY_LATER), dialect) is not None
    # A CIDR is made an ip_network by the column's own type: SQLAlchemy must run that statement.
    rule_shape = (("id", None), ("cluster_id", None), ("cidr", None), ("generation", None))
    assert _compiled(_insert_statement(rules, rule_shape, ("id",)), dialect) is None


def test_the_driver_path_answers_the_rows_sqlalchemy_would(database):
    clusters = resource(cluster_svc.models.RESOURCES, "clusters")
    values = cluster_values()
    with database.begin() as db_session:
        (created,) = execute_prebuilt(db_session, _insert_statement(clusters, shape(values), ("id",)), values)
        nothing = execute_prebuilt(db_session, _insert_statement(clusters, shape(values), ("id",)), values)
        read = db_session.execute(_select_by(clusters, ("id",)), {"id": values["id"]}).mappings().one()

    assert nothing == []  # the ID was taken: ON CONFLICT DO NOTHING returns no row
    assert created == dict(read)
    assert isinstance(created["id"], uuid.UUID) and created["generation"] == 1


def test_a_statement_sqlalchemy_must_run_goes_through_it_and_answers_mappings_too(database):
    cidr = resource(cluster_svc.models.RESOURCES, "firewall_rules").table.c.cidr.type
    statement = select(bindparam("cidr", type_=cidr).label("cidr"), bindparam("n", type_=Integer()).label("n"))
    assert _compiled(statement, database.engine.dialect) is None

    with database.begin() as db_session:
        rows = execute_prebuilt(db_session, statement, {"cidr": ipaddress.ip_network("10.0.0.0/8"), "n": 3})

    assert rows == [{"cidr": ipaddress.ip_network("10.0.0.0/8"), "n": 3}]  # the type's own value, as SQLAlchemy makes it


def test_a_failed_statement_raises_as_sqlalchemy_does_with_its_parameters_hidden(database):
    quotient = bindparam("a", type_=Integer()) / bindparam("b", type_=Integer())
    statement = select(type_coerce(quotient, Integer()).label("q"))
    assert _compiled(statement, database.engine.dialect) is not None

    with pytest.raises(DataError) as failure, database.begin() as db_session:
        execute_prebuilt(db_session, statement, {"a": 424242, "b": 0})

    assert "division by zero" in str(failure.value)
    assert "424242" not in str(failure.value) and "hidden due to hide_parameters" in str(failure.value)
    assert not failure.value.connection_invalidated
    with database.begin() as db_session:  # the same connection, rolled back, serves the next one
        assert db_session.execute(text("SELECT 1")).scalar() == 1


def test_a_connection_that_died_is_invalidated_and_the_next_transaction_gets_a_new_one(database):
    clusters = resource(cluster_svc.models.RESOURCES, "clusters")
    values = cluster_values()
    admin = Database(database.engine.url.render_as_string(hide_password=False), pool_size=1)
    try:
        with pytest.raises(OperationalError) as failure, database.begin() as db_session:
            dead = db_session.execute(text("SELECT pg_backend_pid()")).scalar()
            with admin.begin() as other:  # the server ends the session in the middle of the transaction
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
            execute_prebuilt(db_session, _insert_statement(clusters, shape(values), ("id",)), values)
    finally:
        admin.dispose()

    assert failure.value.connection_invalidated
    with database.begin() as db_session:
        assert db_session.execute(text("SELECT pg_backend_pid()")).scalar() != dead
        assert execute_prebuilt(db_session, _insert_statement(clusters, shape(values), ("id",)), values)


def test_listeners_see_the_statement_as_they_see_sqlalchemy_s(database):
    clusters = resource(cluster_svc.models.RESOURCES, "clusters")
    values = cluster_values()
    with StatementCounter(database.engine).counting() as statements, database.begin() as db_session:
        execute_prebuilt(db_session, _insert_statement(clusters, shape(values), ("id",)), values)
    assert len(statements) == 1 and statements[0].startswith("INSERT INTO clusters")
