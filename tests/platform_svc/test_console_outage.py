"""The console while cluster_svc does not answer (design: the console "closes every incident it
shows"): an object page still answers within the console's 2 s, shows every platform field and
says cluster_svc did not answer, instead of guessing its state."""
from __future__ import annotations

import socket
import time

import pytest
from sqlalchemy import text

from platform_svc.console import CONSOLE_POLICY
from platform_svc.models import RESOURCES
from platform_svc.push import content
from tests.helpers import authed_client, cluster_body, make_account
from tests.platform_svc.conftest import _app, _dispose
from tests.platform_svc.test_console_auth import logged_in, operator  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def silent_app(platform_db_url):
    """platform_svc whose cluster_svc accepts connections and never answers (a SIGSTOPped one)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    app = _app(platform_db_url, f"http://127.0.0.1:{listener.getsockname()[1]}")
    app.extensions["pusher"].breaker = None
    yield app
    _dispose(app)
    listener.close()


def test_an_object_page_during_an_outage_shows_the_platform_side_and_says_cluster_svc_did_not_answer(
    silent_app, platform_database, operator  # noqa: F811
):
    _, api_key = make_account(platform_database, "outage page")
    created = authed_client(silent_app, api_key).post("/v1/clusters", json=cluster_body(name="seen-in-the-dark"))
    assert created.status_code == 201
    browser, _ = logged_in(silent_app, operator)

    started = time.monotonic()
    page = browser.get(f"/console/objects/clusters/{created.json['id']}")
    took = time.monotonic() - started

    text = page.get_data(as_text=True)
    assert page.status_code == 200 and took < CONSOLE_POLICY.longest_call() + 1
    assert "seen-in-the-dark" in text  # every platform field, from the platform's own row...
    assert all(f"<th>{name}</th>" in text for name in content.compared(RESOURCES.by_table("clusters")))
    assert "did not answer" in text and "no row" not in text and "holds none" not in text  # ...theirs unknown
    assert text.count("cluster_svc did not answer:") == 1  # the cause once, not twice


def test_an_object_page_counts_a_long_pending_row_as_stalled_and_its_past_next_try_as_due_now(
    silent_app, platform_database, platform_engine, operator  # noqa: F811
):
    _, api_key = make_account(platform_database, "stalled page")
    created = authed_client(silent_app, api_key).post("/v1/clusters", json=cluster_body(name="waiting-long"))
    with platform_engine.begin() as conn:  # pending for an hour, its next try a minute ago (the rows page's stalled)
        conn.execute(text("UPDATE clusters SET updated_at = now() - interval '1 hour',"
                          " next_attempt_at = now() - interval '1 minute' WHERE id = :id"), {"id": created.json["id"]})
    browser, _ = logged_in(silent_app, operator)

    text_ = browser.get(f"/console/objects/clusters/{created.json['id']}").get_data(as_text=True)

    assert '<span class="state stalled">stalled</span>' in text_
    assert "next try due now" in text_
