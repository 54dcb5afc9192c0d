"""``Idempotency-Status`` on every public answer about one object (the FUN-15 design's header):
how far the caller's call got, read off the row's sync state, never a vocabulary of its own
(platform_svc.states.IDEMPOTENCY_STATUS). Through the test client, against a real cluster_svc
(completed), a platform that cannot reach it (processing) and an id_conflict (failed)."""
from __future__ import annotations

from tests.helpers import cluster_body, drained, rule_body, squat_downstream
from tooling.pair import TOKEN


def status_of(answer) -> str | None:
    return answer.headers.get("Idempotency-Status")


def every_answer_about_one_object(client, key: str, also=lambda object_url: {}) -> dict:
    """Each public answer about one new cluster, by what asked: its create (with ``key``), the
    replay, the recovery route, a GET and a PATCH, ``also``'s (given the object's URL), then its DELETE."""
    created = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})
    object_url = f"/v1/clusters/{created.get_json()['id']}"
    answers = {
        "create": created,
        "replay": client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}),
        "recovery": client.get(f"/v1/clusters?idempotency_key={key}"),
        "get": client.get(object_url),
        "patch": client.patch(object_url, json={"name": "renamed"}),
        **also(object_url),
    }
    answers["delete"] = client.delete(object_url)
    return answers


def test_every_answer_about_an_object_cluster_svc_confirmed_says_completed(client):
    answers = every_answer_about_one_object(client, "status-completed")
    assert {name: (a.status_code, status_of(a)) for name, a in answers.items()} == {
        "create": (201, "completed"), "replay": (200, "completed"), "recovery": (200, "completed"),
        "get": (200, "completed"), "patch": (200, "completed"), "delete": (204, "completed"),
    }


def test_while_cluster_svc_has_not_confirmed_it_every_answer_says_processing(offline_client):
    answers = every_answer_about_one_object(
        offline_client, "status-processing",
        also=lambda object_url: {"rule": offline_client.post(f"{object_url}/firewall-rules", json=rule_body())},
    )
    assert {name: (a.status_code, status_of(a)) for name, a in answers.items()} == {
        "create": (201, "processing"), "replay": (200, "processing"), "recovery": (200, "processing"),
        "get": (200, "processing"), "patch": (200, "processing"), "rule": (201, "processing"),
        "delete": (202, "processing"),
    }
    assert all(a.get_json()["sync_state"] == "pending" for name, a in answers.items() if name != "recovery")


def test_a_row_that_failed_for_good_says_failed_with_its_reason_in_the_body(offline_client, cluster_svc, live_pusher):
    created = offline_client.post("/v1/clusters", json=cluster_body(region="eu-west-1")).get_json()
    squat_downstream(cluster_svc.url, TOKEN, created)
    drained(live_pusher)

    answer = offline_client.get(f"/v1/clusters/{created['id']}")
    assert status_of(answer) == "failed"
    assert "409 id_conflict" in answer.get_json()["sync_error"]


def test_answers_about_no_single_object_carry_no_status(client, cluster):
    assert status_of(client.get("/v1/clusters")) is None  # a listing
    assert status_of(client.get("/v1/clusters?idempotency_key=never-used")) is None  # the recovery route, nothing found
    assert status_of(client.get("/v1/clusters/00000000-0000-4000-8000-000000000000")) is None  # a 404


def test_the_openapi_document_declares_it_wherever_it_is_sent(app):
    spec = app.test_client().get("/openapi.json").get_json()
    item, collection = spec["paths"]["/v1/clusters/{cluster_id}"], spec["paths"]["/v1/clusters"]
    declared = [
        collection["post"]["responses"]["201"], collection["post"]["responses"]["200"],
        collection["get"]["responses"]["200"], item["get"]["responses"]["200"], item["patch"]["responses"]["200"],
        item["delete"]["responses"]["204"], item["delete"]["responses"]["202"],
    ]
    for response in declared:
        header = response["headers"]["Idempotency-Status"]
        assert header["schema"]["enum"] == ["completed", "failed", "processing"]
