"""Admission with no database round trip of its own (platform_svc.api.admission): each worker's
copy of the keys, re-read within the refresh period of a change, and tokens leased from the
account's window. Each "worker" here is an Authenticator of its own on the real database, with
a clock the test steps."""
from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from platform_svc.api import admission, auth, key_ids
from shared.db import Database
from shared.errors import database_unavailable
from tests.helpers import UNREACHED_RATE_LIMIT, ManualClock, SteppedClock, make_account
from tests.platform_svc.test_rate_limit import in_one_window, limited_account
from tooling.testing import StatementCounter, free_port


def worker(platform_database, default_limit=UNREACHED_RATE_LIMIT):
    return admission.Authenticator(platform_database, default_limit, clock=SteppedClock())


def test_in_the_steady_state_a_request_is_admitted_with_no_statement(platform_database, platform_engine):
    account_id, api_key = make_account(platform_database, "steady")
    counter = StatementCounter(platform_database.engine)

    def requests():  # in one window: the tokens of the first lease last it
        authenticate = worker(platform_database)
        with counter.counting() as first:
            assert authenticate(api_key).account_id == account_id
        with counter.counting() as steady:
            admissions = [authenticate(api_key) for _ in range(50)]
            assert authenticate(api_key + "x") is None  # a wrong secret for a key held: no statement either
        return authenticate, list(first), list(steady), admissions

    authenticate, first, steady, admissions = in_one_window(platform_engine, requests)

    # The key ids (and the secret that marks them), the key, then a lease.
    assert ["key_changes" in s for s in first] == [True, False, True, False] and "rate_windows" in first[3]
    assert steady == []
    assert [a.remaining for a in admissions[:3]] == [UNREACHED_RATE_LIMIT - n for n in (2, 3, 4)]

    authenticate.clock.step(admission.REFRESH_SECONDS)
    with counter.counting() as refreshed:
        assert authenticate(api_key).account_id == account_id
    polls = [statement for statement in refreshed if "key_changes" in statement]
    assert len(polls) == 1  # the poll: nothing changed, nothing re-read...
    assert all("rate_windows" in statement for statement in refreshed if statement not in polls)  # (a new window's lease)


def test_made_up_key_ids_cost_no_statement_once_the_ids_are_read(platform_database):
    clock = ManualClock()
    authenticate = admission.Authenticator(platform_database, UNREACHED_RATE_LIMIT, clock=clock)
    counter = StatementCounter(platform_database.engine)
    with counter.counting() as first:
        assert authenticate("0123456789abcdef.made-up") is None
    assert len(first) == 2  # the set of ids and the secret that marks them, once

    with counter.counting() as sent:
        for n in range(500):
            clock.step(0.001)  # arriving one after the other
            assert authenticate(f"{n:016x}.secret") is None
            assert authenticate(f"{n:016x}{n:08x}.secret") is None  # an id with a mark this platform did not make
    # 1,000 requests over 0.5 s: only the poll every refresh period (REFRESH_SECONDS), whatever the rate.
    assert len(sent) <= 0.5 / admission.REFRESH_SECONDS + 1


def test_a_key_issued_after_the_ids_were_read_works_at_its_first_use_by_its_mark(platform_database):
    authenticate = admission.Authenticator(platform_database, UNREACHED_RATE_LIMIT, clock=ManualClock())
    assert authenticate("0123456789abcdef.made-up") is None  # the ids read
    account_id, api_key = make_account(platform_database, "issued since")
    assert api_key.partition(".")[0] not in authenticate.ids  # not in the set: no refresh since

    counter = StatementCounter(platform_database.engine)
    with counter.counting() as sent:
        assert authenticate(api_key).account_id == account_id
    assert ["key_changes" in s for s in sent] == [True, False]  # its look-up, then a lease: as any key's first use


def test_key_ids_carry_a_mark_only_the_platform_makes():
    secret = "the platform's"
    key_id = key_ids.new_key_id(secret)
    assert len(key_id) == 24 and key_ids.issued_here(secret, key_id)
    assert not key_ids.issued_here("another", key_id)
    assert not key_ids.issued_here(secret, key_id[:16] + "00000000")
    assert not key_ids.issued_here(secret, key_id[:16])  # an id issued before the mark: in the set, or nothing


def test_a_revocation_a_removal_and_a_new_limit_hold_in_every_worker_within_the_refresh_period(
    platform_database, platform_engine
):
    account_id, first_key = make_account(platform_database, "changes")
    with platform_database.begin() as db_session:
        second_key = auth.issue_key(db_session=db_session, account_id=account_id)
    removed_account, removed_key = make_account(platform_database, "removed")
    workers = [worker(platform_database), worker(platform_database)]
    for authenticate in workers:
        assert all(authenticate(key) for key in (first_key, second_key, removed_key))

    with platform_database.begin() as db_session:
        auth.revoke_key(db_session=db_session, key_id=second_key.partition(".")[0])
        auth.set_rate_limit(db_session=db_session, account_id=account_id, limit=7)
    with platform_engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM accounts WHERE id = %s", (str(removed_account),))

    for authenticate in workers:
        authenticate.clock.step(admission.REFRESH_SECONDS)
        assert authenticate(second_key) is None and authenticate(removed_key) is None
        assert limit_of(authenticate, first_key) == 7


def limit_of(authenticate, api_key) -> int:
    """The limit a request with ``api_key`` is admitted or refused under."""
    try:
        return authenticate(api_key).limit
    except auth.TooManyRequests as refused:  # the window was spent under the old limit
        return int(refused.headers["RateLimit-Limit"])


def test_two_workers_lend_no_more_than_the_limit_in_a_window_between_them(platform_database, platform_engine):
    _, api_key = limited_account(platform_database, 20)  # leases of 2
    one, two = worker(platform_database), worker(platform_database)

    admitted, refused = in_one_window(
        platform_engine,
        lambda: [authenticate(api_key) for _ in range(10) for authenticate in (one, two)],
        lambda: pytest.raises(auth.TooManyRequests, one, api_key),
    )

    assert all(admitted)  # 20 in the window, half in each worker...
    assert sorted(a.remaining for a in admitted) == list(range(20))  # ...each counted once across both
    assert refused.value.status == 429  # ...and the 21st refused


def test_once_its_window_is_spent_an_account_is_refused_with_no_statement_until_the_window_ends(
    platform_database, platform_engine
):
    _, api_key = limited_account(platform_database, 1)
    held = []
    authenticate = admission.Authenticator(platform_database, UNREACHED_RATE_LIMIT, clock=SteppedClock(),
                                           sleep=held.append)
    counter = StatementCounter(platform_database.engine)

    def flood():
        with counter.counting() as sent:
            admitted = authenticate(api_key)
            refusals = []
            for _ in range(20):
                with pytest.raises(auth.TooManyRequests) as refused:
                    authenticate(api_key)
                refusals.append(refused.value.status)
        return admitted, refusals, list(sent)

    admitted, refusals, sent = in_one_window(platform_engine, flood)

    assert admitted.limit == 1 and refusals == [429] * 20
    # The key ids and their secret, the key, the lease of its one token, the lease that came back
    # empty: then nothing.
    assert len(sent) == 5
    assert len(held) == 20 and all(0 <= seconds <= 1 for seconds in held)  # each answered when the window ends


def test_while_the_database_is_away_only_the_refresh_period_is_admitted_then_every_request_fails(platform_database):
    account_id, api_key = make_account(platform_database, "outage")
    authenticate = worker(platform_database)
    assert authenticate(api_key).account_id == account_id
    away = Database(f"postgresql+psycopg2://nobody@127.0.0.1:{free_port()}/gone", pool_size=1)
    authenticate.database = away
    try:
        assert authenticate(api_key).account_id == account_id  # from the copy and the tokens held
        authenticate.clock.step(admission.REFRESH_SECONDS)
        with pytest.raises(DBAPIError):  # answered 503 with Retry-After (tests/shared/test_database_errors.py)
            authenticate(api_key)
        with pytest.raises(SQLAlchemyError) as failed:  # refused again (its own refresh: a refusal is quick)
            authenticate("0123456789abcdef.never-seen")
        assert database_unavailable(failed.value)
    finally:
        away.dispose()


def test_a_key_another_request_looks_up_while_the_keys_are_re_read_is_admitted(platform_database):
    """Requests are greenlets: while one request's refresh re-reads the keys held (a change moved the
    generation), another's look-up of a new key can finish. The re-read never asked for that key, so
    it must not take it for revoked: the key's every later request on this worker would answer 401
    (and count against its address as a key that admits nothing), until the next change."""
    _, held_key = make_account(platform_database, "held")
    authenticate = worker(platform_database)
    assert authenticate(held_key)
    new_account, new_key = make_account(platform_database, "new")  # a change: the next refresh re-reads
    re_read, meanwhile = authenticate._read, [new_key.partition(".")[0]]

    def read_while_another_request_looks_up(*, ids, touch):
        rows = re_read(ids=ids, touch=touch)
        if ids and meanwhile:  # the re-read's statement has answered, and the other request's look-up finishes
            assert authenticate._look_up(meanwhile.pop()) is not None
        return rows

    authenticate._read = read_while_another_request_looks_up
    authenticate.clock.step(admission.REFRESH_SECONDS)
    assert authenticate(held_key)  # its refresh re-reads the keys held
    assert not meanwhile

    assert authenticate(new_key).account_id == new_account


def test_a_clock_set_back_makes_the_keys_due_for_a_refresh(platform_database):
    """libfaketime steps a service's monotonic clock back (tests/e2e/test_clocks.py): the last
    refresh then seems to lie in the future, which must not pass for a recent one (a revocation
    would hold for as long as the step)."""
    clock = ManualClock()
    authenticate = admission.Authenticator(platform_database, UNREACHED_RATE_LIMIT, clock=clock)
    account_id, api_key = make_account(platform_database, "after a step back")
    assert authenticate(api_key).account_id == account_id
    with platform_database.begin() as db_session:
        auth.revoke_key(db_session=db_session, key_id=api_key.partition(".")[0])
    clock.step(-40 * 86400)
    assert authenticate(api_key) is None


def test_a_clock_set_back_after_a_refresh_waited_in_vain_tries_the_database_again(platform_database):
    """A refresh that waits in vain for a hung database answers the requests queued behind it 503
    at once, for the refresh period. A clock stepped back after it (libfaketime's:
    tests/e2e/test_clocks.py) must not make that period last as long as the step: every request
    of the worker answered 503 for ten minutes after the clock was set right."""
    clock = ManualClock()
    authenticate = admission.Authenticator(platform_database, UNREACHED_RATE_LIMIT, clock=clock)
    account_id, api_key = make_account(platform_database, "hung, then a step back")
    assert authenticate(api_key).account_id == account_id
    answers = authenticate._read

    def hung(**_):
        clock.step(10 * 60)  # the wait in vain, on a clock set ahead meanwhile
        raise admission.NoDatabaseInTime("no pooled connection came in time")

    authenticate._read = hung
    clock.step(admission.REFRESH_SECONDS)
    with pytest.raises(admission.NoDatabaseInTime):
        authenticate(api_key)
    authenticate._read = answers
    with pytest.raises(admission.NoDatabaseInTime):  # queued behind it: 503 at once
        authenticate(api_key)

    clock.step(-10 * 60)  # set right again
    assert authenticate(api_key).account_id == account_id
