"""Waiting for a database through a failover (``DATABASE_WAIT_SECONDS``, shared.db.Database):
a view the database could not take is made again, for up to the wait, and answered once it can;
never a view that tried to commit (its commit may have happened), never for an error a commit
raised. Real PostgreSQL refusals: a write in a read-only transaction (25006, what a node still
in recovery answers) and a deferred trigger failing a commit with 40001."""
from __future__ import annotations

import threading
import time

import pytest

from shared.api import ServiceFlask
from shared.db import Database
from shared.errors import register_error_handlers
from tooling.testing import assert_problem

READ_ONLY_WRITE = "SET TRANSACTION READ ONLY; CREATE TEMP TABLE refused (id int)"
# A commit that fails as a failover's would (40001), raised by the commit itself: a deferred trigger.
FAILING_COMMIT = """
CREATE TEMP TABLE deferred (id int) ON COMMIT DROP;
CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN RAISE EXCEPTION 'refused at commit' USING ERRCODE = '40001'; END $$;
CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON deferred DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
INSERT INTO deferred VALUES (1)
"""


@pytest.fixture
def served(pg_server_url):
    """``served(wait, view)``: a test client of an app whose one route runs ``view(database, calls)``."""
    databases = []

    def serve(wait: float, view):
        database = Database(pg_server_url, pool_size=2, connect_wait=wait)
        databases.append(database)
        app = ServiceFlask(__name__)
        database.init_app(app)
        register_error_handlers(app)
        calls: list[float] = []

        @app.post("/write")
        def write():
            calls.append(time.monotonic())
            return view(database, len(calls))

        return app.test_client(), calls

    yield serve
    for database in databases:
        database.dispose()


def refused_twice_then_written(database, call):
    with database.begin() as connection:
        connection.exec_driver_sql(READ_ONLY_WRITE if call <= 2 else "SELECT 1")
    return {"written": call}


def test_a_view_the_database_refused_is_made_again_and_answered_once_it_can(served):
    client, calls = served(5.0, refused_twice_then_written)

    response = client.post("/write")

    assert (response.status_code, response.get_json()) == (200, {"written": 3})
    assert len(calls) == 3 and calls[2] - calls[0] >= 0.3  # paused 0.1 s, then 0.2 s


def test_without_a_wait_the_refusal_answers_503_at_once(served):
    client, calls = served(0.0, refused_twice_then_written)

    assert_problem(client.post("/write"), 503, "unavailable")
    assert len(calls) == 1


def test_past_the_wait_the_refusal_answers_503(served):
    client, calls = served(0.5, lambda database, call: refused_twice_then_written(database, 1))

    started = time.monotonic()
    assert_problem(client.post("/write"), 503, "unavailable")
    assert 0.3 <= time.monotonic() - started < 2.0
    assert len(calls) == 3  # at 0, 0.1 and 0.3 s; a pause of 0.5 s more would pass the wait


def test_a_view_that_committed_is_never_made_again(served):
    def commit_then_refused(database, call):
        with database.begin() as connection:
            connection.exec_driver_sql("SELECT 1")
        return refused_twice_then_written(database, call)

    client, calls = served(5.0, commit_then_refused)

    assert_problem(client.post("/write"), 503, "unavailable")
    assert len(calls) == 1


def test_an_error_a_commit_raised_is_never_tried_again_even_in_another_request(served):
    """A group commit's followers raise, in their own requests, the error its leader's commit
    raised (shared.coalesce): none of them may be made again, the commit may have happened."""
    def raised_by_a_shared_flush(database, call):
        raised = []

        def flush():  # the leader's flush, outside this request
            try:
                with database.begin() as connection:
                    connection.exec_driver_sql(FAILING_COMMIT)
            except Exception as error:  # noqa: BLE001 - handed to the follower, as the coalescer does
                raised.append(error)

        leader = threading.Thread(target=flush)
        leader.start()
        leader.join()
        raise raised[0]

    client, calls = served(5.0, raised_by_a_shared_flush)

    assert_problem(client.post("/write"), 503, "unavailable")
    assert len(calls) == 1
