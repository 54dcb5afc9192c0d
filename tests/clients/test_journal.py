"""The client's journal (idempotent_pair_client.journal): a named operation's key is in the file
before its request leaves, the same name sends the same key from any process, resume() completes
what a crash left unanswered, and concurrent processes sharing the file agree. Against the
scripted server; the crash itself, against the real pair: tests/e2e/test_journal_crashes.py."""
from __future__ import annotations

import multiprocessing

import pytest
from idempotent_pair_client import Journal, OperationReused, PlatformClient
from idempotent_pair_client.aio import AsyncPlatformClient

from tests.helpers import Synced
from tooling.scripted import Received, hang, reply

KEY = "0123456789abcdef.secret"
BODY = {"name": "main-db"}
OBJECT = {"id": "0191e4b4-6b1b-7000-8000-000000000001", "name": "main-db"}


@pytest.fixture
def journal(tmp_path):
    opened = Journal(tmp_path / "caller.journal")
    yield opened
    opened.close()


def client(server, journal, **options):
    return PlatformClient(server.url, api_key=KEY, journal=journal, timeout=1.0, retry_for=0.0, **options)


def test_the_key_is_in_the_journal_before_the_request_is_sent(server, journal):
    seen = []

    def answer(request: Received):
        seen.append((request.headers["Idempotency-Key"], journal.get("order-1")))
        return reply(201, OBJECT)

    server.script(answer)
    made = client(server, journal).create("/v1/things", BODY, operation="order-1")

    [(sent, journaled)] = seen
    assert journaled is not None and journaled.idempotency_key == sent and journaled.status is None
    assert made == OBJECT and journal.get("order-1").status == 201 and journal.unanswered() == []


def test_a_call_left_unanswered_is_resumed_with_its_key_exactly_once(server, tmp_path):
    first = Journal(tmp_path / "shared.journal")
    server.script(hang(3))
    with pytest.raises(Exception):  # NoAnswer: the process "dies" here, as far as the journal knows
        client(server, first).create("/v1/things", BODY, operation="order-2")
    [left] = first.unanswered()
    first.close()

    restarted = Journal(tmp_path / "shared.journal")  # another process, after the crash
    server.script(reply(200, OBJECT, {"Idempotent-Replayed": "true"}))
    [resumed] = client(server, restarted).resume()

    assert resumed == OBJECT and resumed.meta.replayed
    assert server.requests[-1].headers["Idempotency-Key"] == left.idempotency_key
    assert server.requests[-1].json == BODY  # the same request
    assert restarted.unanswered() == [] and client(server, restarted).resume() == []  # once
    restarted.close()


def test_the_same_operation_sends_the_same_key_and_another_request_under_its_name_is_refused(server, journal):
    server.script(reply(201, OBJECT), reply(200, OBJECT))
    api = client(server, journal)
    api.create("/v1/things", BODY, operation="order-3")
    api.create("/v1/things", BODY, operation="order-3")
    assert len({request.headers["Idempotency-Key"] for request in server.requests}) == 1

    with pytest.raises(OperationReused):
        api.create("/v1/things", {"name": "other"}, operation="order-3")
    with pytest.raises(ValueError, match="journal"):
        PlatformClient(server.url, api_key=KEY).create("/v1/things", BODY, operation="order-4")
    with pytest.raises(ValueError, match="not both"):
        api.create("/v1/things", BODY, operation="order-4", idempotency_key="mine")


def test_a_refusal_is_an_answer_and_is_not_sent_again(server, journal):
    server.script(reply(422, {"type": "about:blank", "title": "t", "status": 422, "detail": "d",
                              "code": "validation_error", "errors": {}}))
    with pytest.raises(Exception):
        client(server, journal).create("/v1/things", BODY, operation="order-5")
    assert journal.get("order-5").status == 422 and journal.unanswered() == []


def begin(path: str, name: str, queue) -> None:
    journal = Journal(path)
    queue.put(journal.begin(name, "POST", "/v1/things", BODY).idempotency_key)
    journal.close()


def test_processes_sharing_a_journal_begin_an_operation_once(tmp_path):
    path = str(tmp_path / "shared.journal")
    Journal(path).close()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=begin, args=(path, "order-6", queue)) for _ in range(6)]
    for process in processes:
        process.start()
    keys = {queue.get(timeout=60) for _ in processes}
    for process in processes:
        process.join(60)
    assert len(keys) == 1


def test_answered_operations_are_pruned_after_the_horizon_and_begun_ones_never(journal):
    journal.begin("old-answered", "POST", "/v1/things", BODY)
    journal.answered("old-answered", 201)
    journal.begin("old-begun", "POST", "/v1/things", BODY)
    assert journal.prune(older_than=-1) == 1  # everything counts as old here
    assert journal.get("old-answered") is None and journal.get("old-begun") is not None


def test_the_asyncio_twin_journals_and_resumes_alike(server, journal):
    server.script(hang(3))
    twin = Synced(AsyncPlatformClient(server.url, api_key=KEY, journal=journal, timeout=1.0, retry_for=0.0))
    with pytest.raises(Exception):
        twin.create("/v1/things", BODY, operation="order-7")
    server.script(reply(201, OBJECT))
    assert twin.resume() == [OBJECT]
    assert journal.unanswered() == []
    twin.close()
