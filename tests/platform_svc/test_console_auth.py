"""The console's door (platform_svc.console.auth) through Flask's test client: its own credential,
its cookie, CSRF tokens on every POST, its headers. What an operator sees on the pages is proven in
a real browser (tests/e2e/test_console.py)."""
from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import func, text

from platform_svc.cli import main
from platform_svc.console import reads
from platform_svc.console.auth import create_operator
from platform_svc.models import RESOURCES
from tests.helpers import cluster_body
from tooling.pair import TOKEN
from tooling.testing import wait_for

PAGES = ["/console/", "/console/rows", "/console/repair", "/console/rows?state=failed"]
FORMS = ["/console/retry", "/console/repair", "/console/logout"]


@pytest.fixture
def operator(platform_database, request):
    name = f"op-{request.node.name}"[:100]
    with platform_database.begin() as db_session:
        return name, create_operator(db_session=db_session, name=name)


def csrf_of(page: bytes) -> str:
    return re.search(rb'name="csrf_token" value="([^"]+)"', page).group(1).decode()


def logged_in(app, operator, base_url="http://localhost"):
    browser = app.test_client()
    page = browser.get("/console/login", base_url=base_url)
    answer = browser.post(
        "/console/login", base_url=base_url,
        data={"operator": operator[0], "secret": operator[1], "csrf_token": csrf_of(page.data)},
    )
    assert answer.status_code == 302, answer.data
    return browser, answer


@pytest.mark.parametrize("path", PAGES)
def test_a_page_without_a_session_sends_the_browser_to_the_login_form(app, path):
    answer = app.test_client().get(path)

    assert answer.status_code == 302
    assert answer.headers["Location"].startswith("/console/login?next=")


@pytest.mark.parametrize("path", FORMS)
def test_a_post_without_a_session_is_refused(app, path):
    assert app.test_client().post(path, data={"csrf_token": "x", "mode": "dry-run"}).status_code == 401


@pytest.mark.parametrize("who", ["api key", "internal token"])
def test_neither_an_api_key_nor_the_internal_token_opens_a_page(app, account, who):
    browser = app.test_client()
    browser.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {account[1] if who == 'api key' else TOKEN}"

    assert browser.get("/console/").status_code == 302
    assert browser.post("/console/retry", data={"reason": "x"}).status_code == 401


def test_logging_in_sets_a_cookie_scripts_and_other_sites_cannot_use(app, operator):
    browser, answer = logged_in(app, operator)

    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    page = browser.get("/console/")
    assert page.status_code == 200 and operator[0].encode() in page.data


def test_over_tls_the_cookie_is_secure(app, operator):
    _, answer = logged_in(app, operator, base_url="https://localhost")

    assert "; Secure" in answer.headers["Set-Cookie"]


def test_a_wrong_secret_opens_nothing(app, operator):
    browser = app.test_client()
    page = browser.get("/console/login")

    answer = browser.post(
        "/console/login", data={"operator": operator[0], "secret": "not-it", "csrf_token": csrf_of(page.data)}
    )

    assert answer.status_code == 401
    assert browser.get("/console/").status_code == 302


@pytest.mark.parametrize("token", [None, "", "forged"])
def test_a_post_without_the_sessions_csrf_token_is_refused(app, platform_database, operator, token):
    browser, _ = logged_in(app, operator)
    data = {"mode": "dry-run"} | ({} if token is None else {"csrf_token": token})

    answer = browser.post("/console/repair", data=data)

    assert answer.status_code == 400 and b"CSRF token" in answer.data
    with platform_database.begin() as db_session:  # nothing was started
        started = db_session.execute(text("SELECT count(*) FROM repair_runs WHERE operator = :o"), {"o": operator[0]})
        assert started.scalar_one() == 0


def test_the_login_form_needs_its_csrf_token_too(app, operator):
    answer = app.test_client().post("/console/login", data={"operator": operator[0], "secret": operator[1]})

    assert answer.status_code == 400


def test_pages_forbid_scripts_framing_and_other_hosts(app, operator):
    browser, _ = logged_in(app, operator)

    for path in [*PAGES, "/console/login"]:
        headers = browser.get(path).headers
        policy = headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
        assert "script-src" not in policy and "unsafe-inline" not in policy  # so no script runs at all
        assert headers["X-Frame-Options"] == "DENY"


def test_a_new_secret_ends_the_old_sessions_and_the_old_secret(app, platform_database, operator):
    browser, _ = logged_in(app, operator)
    with platform_database.begin() as db_session:
        create_operator(db_session=db_session, name=operator[0])

    assert browser.get("/console/").status_code == 302
    with pytest.raises(AssertionError):
        logged_in(app, operator)


def test_create_operator_prints_a_one_time_secret_that_opens_the_console(app, platform_db_url, request):
    name = f"cli-{request.node.name}"[:100]
    env = {"PLATFORM_DATABASE_URL": platform_db_url}

    result = CliRunner().invoke(main, ["create-operator", name, "--json"], env=env)

    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    assert created["operator"] == name
    logged_in(app, (name, created["secret"]))
    revoked = CliRunner().invoke(main, ["revoke-operator", name], env=env)
    assert revoked.exit_code == 0, revoked.output
    with pytest.raises(AssertionError):
        logged_in(app, (name, created["secret"]))


# What the rows page reads (platform_svc.console.reads), by calling it -----------------------


def failed(client, platform_database, n, reason):
    """``n`` new clusters of the client's account marked failed with ``reason``, as the pusher marks one."""
    resource = next(iter(RESOURCES))
    ids = [client.post("/v1/clusters", json=cluster_body(name=f"paged-{i}")).get_json()["id"] for i in range(n)]
    with platform_database.begin() as db_session:
        db_session.execute(
            resource.table.update().where(resource.table.c.id.in_(ids))
            .values(sync_failed_at=func.now(), sync_error=reason)
        )
    return resource, sorted(uuid.UUID(i) for i in ids)


def test_the_rows_come_a_page_at_a_time_in_id_order_after_the_cursor(client, platform_database):
    reason = f"POST /v1/clusters: 409 id_conflict: paging {uuid.uuid4()}"
    resource, ids = failed(client, platform_database, 5, reason)
    pages, after = [], None
    with platform_database.engine.connect() as db_session:
        while True:
            rows, after = reads.rows_needing_a_person(
                db_session=db_session, resource=resource, stalled_after=timedelta(hours=1), state="failed",
                reason=reason[-36:].upper(), after=after, limit=2,
            )
            pages.append([row["id"] for row in rows])
            if after is None:
                break

    assert pages == [ids[0:2], ids[2:4], ids[4:5]]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("POST /v1/clusters: 409 id_conflict: cluster 0190 already exists", "409 id_conflict"),
        ("parent_failed: 01900000-0000-7000-8000-000000000123 id_conflict", "parent_failed"),
        ("deleted in cluster_svc while alive on the platform; IDs are never reused", "deleted in cluster_svc while"
         " alive on the platform"),
    ],
)
def test_a_failure_is_grouped_by_text_retry_all_finds_again(error, reason):
    assert reads.reason_of(error) == reason
    assert reason.lower() in error.lower()  # what --reason (and "Retry all") matches


def test_a_dry_run_records_its_progress_page_by_page_and_its_findings(app, client, platform_database,
                                                                      downstream_engine):
    """What "compared N of M" reads, page after page, and the finding on the run's page at the end."""
    from platform_svc.console.runs import RepairRuns, read_run

    made = [client.post("/v1/clusters", json=cluster_body(name=f"drifting-{i}")).get_json() for i in range(15)]
    assert {cluster["sync_state"] for cluster in made} == {"synced"}
    cluster = made[7]
    with downstream_engine.begin() as conn:  # a hand edit downstream
        conn.execute(text("UPDATE clusters SET plan = 'memory-8' WHERE id = :id"), {"id": cluster["id"]})
    console = app.extensions["console"]
    seen = []

    class Watched(RepairRuns):
        def _progress(self, run_id, *, compared, findings):
            super()._progress(run_id, compared=compared, findings=findings)
            with platform_database.engine.connect() as db_session:
                seen.append(read_run(db_session=db_session, run_id=run_id)["compared"])

    runs = Watched(console.database, console.client, console.horizon, page_size=7)
    try:
        run_id = runs.start(operator="tests", dry_run=True)

        def finished():
            with platform_database.engine.connect() as db_session:
                run = read_run(db_session=db_session, run_id=run_id)
            return run if run["finished_at"] else None

        run = wait_for(finished, timeout=60, what="the dry run finished")
    finally:  # this worker's later tests compare both databases whole
        with downstream_engine.begin() as conn:
            conn.execute(text("UPDATE clusters SET plan = :plan WHERE id = :id"),
                         {"plan": cluster["plan"], "id": cluster["id"]})

    assert run["error"] is None and "dry run, nothing changed" in run["summary"]
    assert len(seen) >= 3 and seen == sorted(seen) and seen[0] < seen[-1] == run["compared"]  # a page at a time
    assert run["compared"] >= run["total"] - 1  # every synced row (give or take one another test changed)
    assert {"resource": "cluster", "finding": "diverged", "id": cluster["id"], "detail": "plan"} in run["findings"]
