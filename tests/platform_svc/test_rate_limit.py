"""The per-account limit on public requests, and keys that stop working once they are revoked,
through the test client (the same app gunicorn serves). Across processes: tests/e2e/test_credentials.py.
The admission's own mechanics (the copy of the keys, the leases): tests/platform_svc/test_admission.py.

The limit counts in one-second windows of the database's clock. A test that needs
its requests inside one window starts them early in a second and checks, after,
that the database's second did not change meanwhile; if it did, it tries again.
"""
from __future__ import annotations

import sys
import uuid

from sqlalchemy import text

from platform_svc.api import auth
from tests.helpers import UNREACHED_RATE_LIMIT, ManualClock, authed_client, cluster_body, keys_reread, make_account
from tooling.testing import StatementCounter, assert_problem
from tooling.windows import database_second, in_one_database_second


def in_one_window(engine, admitted, then=None, *, tries: int = 10):
    """Run ``admitted()`` starting early in a database second, until a run stayed inside that second
    (one window of the limit); then ``then()`` (the request past the limit, answered when the window
    ends). Returns what ``admitted`` returned, or both results."""
    result, _ = in_one_database_second(engine, admitted, tries=tries)
    return result if then is None else (result, then())


def limited_account(platform_database, limit):
    account_id, api_key = make_account(platform_database, f"limited to {limit}")
    with platform_database.begin() as db_session:
        assert auth.set_rate_limit(db_session=db_session, account_id=account_id, limit=limit)
    return account_id, api_key


def test_past_its_limit_an_account_gets_429_when_its_window_ends_with_the_ratelimit_fields(
    app, platform_database, platform_engine
):
    _, api_key = limited_account(platform_database, 3)
    client = authed_client(app, api_key)

    admitted, refused = in_one_window(
        platform_engine,
        lambda: [client.get("/v1/clusters") for _ in range(3)],
        lambda: (database_second(platform_engine)[0], client.get("/v1/clusters"), database_second(platform_engine)[0]),
    )

    assert [a.status_code for a in admitted] == [200, 200, 200]
    assert [a.headers["RateLimit-Remaining"] for a in admitted] == ["2", "1", "0"]
    for answer in admitted:
        assert answer.headers["RateLimit-Limit"] == "3"
        assert answer.headers["RateLimit-Policy"] == "3;w=1"
        assert answer.headers["RateLimit-Reset"] == "1"  # whole seconds, at least 1
    sent_in, answer, answered_in = refused
    problem = assert_problem(answer, 429, "too_many_requests")
    assert "3 requests per second" in problem["detail"]
    assert answered_in > sent_in  # held until its window ended, so the caller may try again at once:
    assert (answer.headers["Retry-After"], answer.headers["RateLimit-Reset"]) == ("0", "0")
    assert (answer.headers["RateLimit-Limit"], answer.headers["RateLimit-Remaining"]) == ("3", "0")
    assert "X-Request-ID" in answer.headers
    assert client.get("/v1/clusters").status_code == 200  # the next window


def test_a_refused_request_does_nothing(app, platform_database, platform_engine):
    account_id, api_key = limited_account(platform_database, 1)
    client = authed_client(app, api_key)

    created, refused = in_one_window(
        platform_engine,
        lambda: client.post("/v1/clusters", json=cluster_body(name="first")),
        lambda: client.post("/v1/clusters", json=cluster_body(name="second")),
    )

    assert (created.status_code, refused.status_code) == (201, 429)
    with platform_engine.connect() as conn:
        stored = conn.execute(text("SELECT name FROM clusters WHERE account_id = :a"), {"a": account_id}).scalars()
        assert list(stored) == ["first"]


def test_an_idempotency_key_replay_counts_like_the_read_it_is(app, platform_database, platform_engine):
    _, api_key = limited_account(platform_database, 3)
    client = authed_client(app, api_key)

    def burst():
        key = str(uuid.uuid4())
        first = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})
        replays = [client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}) for _ in range(2)]
        return first, replays

    (first, replays), over = in_one_window(
        platform_engine, burst,
        lambda: client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": str(uuid.uuid4())}),
    )

    assert first.status_code == 201 and first.headers["RateLimit-Remaining"] == "2"
    assert [(r.status_code, r.headers["Idempotent-Replayed"]) for r in replays] == [(200, "true")] * 2
    assert [r.headers["RateLimit-Remaining"] for r in replays] == ["1", "0"]  # each counted
    assert over.status_code == 429  # a flood of replays is refused like any other


def test_accounts_are_limited_apart(app, platform_database, platform_engine):
    _, noisy_key = limited_account(platform_database, 1)
    _, quiet_key = limited_account(platform_database, 1)
    noisy, quiet = authed_client(app, noisy_key), authed_client(app, quiet_key)

    admitted, refused = in_one_window(
        platform_engine,
        lambda: [noisy.get("/v1/clusters").status_code, quiet.get("/v1/clusters").status_code],
        lambda: noisy.get("/v1/clusters").status_code,
    )

    assert (admitted, refused) == ([200, 200], 429)


def test_without_a_limit_of_its_own_an_account_has_the_default(app, platform_database):
    account_id, api_key = limited_account(platform_database, 7)
    client = authed_client(app, api_key)
    assert client.get("/v1/clusters").headers["RateLimit-Limit"] == "7"

    with platform_database.begin() as db_session:
        auth.set_rate_limit(db_session=db_session, account_id=account_id, limit=None)
    keys_reread(app)

    assert client.get("/v1/clusters").headers["RateLimit-Limit"] == str(UNREACHED_RATE_LIMIT)  # this app's default


def test_refused_keys_count_nothing_and_carry_no_ratelimit_fields(app, platform_database, platform_engine):
    _, api_key = limited_account(platform_database, 1)
    wrong = authed_client(app, api_key[:-1] + ("A" if api_key[-1] != "A" else "B"))

    answers = in_one_window(
        platform_engine, lambda: [wrong.get("/v1/clusters") for _ in range(3)] + [authed_client(app, api_key).get("/v1/clusters")]
    )

    for answer in answers[:3]:
        assert_problem(answer, 401, "unauthorized")
        assert "RateLimit-Limit" not in answer.headers
    assert answers[3].status_code == 200  # a stranger who knows only the key id spent none of its requests


def test_a_revoked_key_is_refused_once_the_keys_are_reread_and_the_others_keep_working(app, platform_database):
    account_id, first_key = make_account(platform_database, "two keys")
    with platform_database.begin() as db_session:
        second_key = auth.issue_key(db_session=db_session, account_id=account_id)
    first, second = authed_client(app, first_key), authed_client(app, second_key)
    assert first.get("/v1/clusters").status_code == second.get("/v1/clusters").status_code == 200

    with platform_database.begin() as db_session:
        revoked = auth.revoke_key(db_session=db_session, key_id=second_key.partition(".")[0])
    assert revoked.account_id == account_id
    keys_reread(app)

    assert_problem(second.get("/v1/clusters"), 401, "unauthorized")
    assert first.get("/v1/clusters").status_code == 200


def test_an_account_or_key_removed_by_hand_is_401_never_500(app, platform_database, platform_engine):
    removed_account, account_key = make_account(platform_database, "removed by hand")
    kept_account, removed_key = make_account(platform_database, "key removed by hand")
    clients = [authed_client(app, key) for key in (account_key, removed_key)]
    assert [c.get("/v1/clusters").status_code for c in clients] == [200, 200]

    with platform_engine.begin() as conn:
        conn.execute(text("DELETE FROM accounts WHERE id = :id"), {"id": removed_account})  # its keys go with it
        conn.execute(text("DELETE FROM api_keys WHERE account_id = :id"), {"id": kept_account})
    keys_reread(app)

    for client in clients:
        assert_problem(client.get("/v1/clusters"), 401, "unauthorized")
        assert_problem(client.post("/v1/clusters", json=cluster_body()), 401, "unauthorized")


def test_last_use_is_written_at_most_once_a_minute(app, platform_database, platform_engine):
    account_id, api_key = make_account(platform_database, "last use")
    client = authed_client(app, api_key)

    def last_used():
        with platform_engine.connect() as conn:
            return conn.execute(text("SELECT last_used_at FROM api_keys WHERE account_id = :a"), {"a": account_id}).scalar()

    assert last_used() is None
    client.get("/v1/clusters")
    first = last_used()
    assert first is not None
    for _ in range(5):
        client.get("/v1/clusters")
    assert last_used() == first  # not written again within the minute

    with platform_engine.begin() as conn:
        conn.execute(text("UPDATE api_keys SET last_used_at = now() - interval '61 seconds' WHERE account_id = :a"),
                     {"a": account_id})
    app.extensions["authenticator"].clock.step(61)  # a minute later in the worker too
    client.get("/v1/clusters")
    assert last_used() > first


def test_a_key_admitted_from_the_copy_after_its_account_was_removed_is_401_never_500(app, platform_database, platform_engine):
    """Within the refresh period a worker still admits the removed account's key from its copy;
    the write then meets the account's foreign key, which is the caller's 401, not a 500."""
    account_id, api_key = make_account(platform_database, "removed under a write")
    client = authed_client(app, api_key)
    assert client.get("/v1/clusters").status_code == 200  # held, admitted from the copy from now on

    with platform_engine.begin() as conn:
        conn.execute(text("DELETE FROM accounts WHERE id = :id"), {"id": account_id})

    answer = client.post("/v1/clusters", json=cluster_body())  # no refresh yet: the copy admits it
    assert_problem(answer, 401, "unauthorized")
    assert "removed" in answer.json["detail"]


# Keys that admit nothing: the worker holds every live key id ----------------------------------


def made_up_key() -> str:
    return f"{uuid.uuid4().hex[:16]}.{uuid.uuid4().hex}"


def test_made_up_keys_from_a_thousand_addresses_cost_no_statement(app, platform_database, monkeypatch):
    _, api_key = make_account(platform_database, "beside the flood")
    assert authed_client(app, api_key).get("/v1/clusters").status_code == 200  # the ids read
    now = app.extensions["authenticator"].clock()
    monkeypatch.setattr(app.extensions["authenticator"], "clock", lambda: now)  # no periodic poll meanwhile
    flooder = app.test_client()

    counter = StatementCounter(app.extensions["database"].engine)
    with counter.counting() as statements:
        answers = [
            flooder.get("/v1/clusters", headers={"Authorization": f"Bearer {made_up_key()}"},
                        environ_base={"REMOTE_ADDR": f"127.0.{n // 250}.{n % 250 + 1}"}).status_code
            for n in range(1000)
        ]

    assert answers == [401] * 1000  # refused, and never 429: no source is blamed
    assert statements == []
    assert authed_client(app, api_key).get("/v1/clusters").status_code == 200


def test_wrong_secrets_for_a_held_key_never_refuse_its_owner_nor_cost_a_statement(app, platform_database, monkeypatch):
    held = []
    refusals, authenticator = app.extensions["refusals"], app.extensions["authenticator"]
    monkeypatch.setattr(refusals, "sleep", held.append)  # each late refusal recorded, not waited
    _, api_key = make_account(platform_database, "guessed at")
    owner = authed_client(app, api_key)
    source = {"REMOTE_ADDR": "192.0.2.77"}  # the owner's address, and the guesser's
    assert owner.get("/v1/clusters", environ_base=source).status_code == 200
    key_id = api_key.partition(".")[0]
    guesser = app.test_client()
    now, refilled = authenticator.clock(), refusals.clock()
    monkeypatch.setattr(authenticator, "clock", lambda: now)  # no periodic poll meanwhile
    monkeypatch.setattr(refusals, "clock", lambda: refilled)  # no refill meanwhile

    counter = StatementCounter(app.extensions["database"].engine)
    with counter.counting() as statements:
        guesses = [
            guesser.get("/v1/clusters", headers={"Authorization": f"Bearer {key_id}.{uuid.uuid4().hex}"},
                        environ_base=source).status_code
            for _ in range(300)
        ]
    assert guesses == [401] * 300 and statements == []
    assert len(held) == 300 - 100  # past the address's burst, each guess answered late...
    before = len(held)
    assert [owner.get("/v1/clusters", environ_base=source).status_code for _ in range(3)] == [200] * 3
    assert len(held) == before  # ...and the owner, at the same address, at once


def test_a_source_sending_keys_that_admit_nothing_gets_its_refusals_late_once_its_bucket_is_empty():
    clock, held = ManualClock(), []
    refusals = auth.SlowRefusals(rate=2.0, burst=3, clock=clock, sleep=held.append)
    for _ in range(3):
        refusals.refused("192.0.2.1")
    assert held == []
    refusals.refused("192.0.2.1")
    assert held == [1.0]  # answered after a second
    refusals.refused("192.0.2.2")  # another source: its own bucket
    assert held == [1.0]
    clock.step(0.5)  # at 2 a second, half a second refills one
    refusals.refused("192.0.2.1")
    assert held == [1.0]


def test_a_new_key_works_at_its_first_use_even_during_a_flood_of_made_up_keys(app, platform_database):
    flooder = app.test_client()
    _, first = make_account(platform_database, "new at once")
    assert authed_client(app, first).get("/v1/clusters").status_code == 200  # issued after the ids were read

    for _ in range(50):  # a flood of made-up keys...
        flooder.get("/v1/clusters", headers={"Authorization": f"Bearer {made_up_key()}"})
    _, second = make_account(platform_database, "new during a flood")
    assert authed_client(app, second).get("/v1/clusters").status_code == 200  # ...holds back no new key


def test_the_set_of_key_ids_at_100000_keys_is_a_few_megabytes():
    ids = frozenset(f"{n:016x}" for n in range(100_000))  # as auth.issue_key makes them: 16 hex digits
    size = sys.getsizeof(ids) + sum(sys.getsizeof(key_id) for key_id in ids)
    assert size < 16 * 2**20, size  # about 11 MB a worker
