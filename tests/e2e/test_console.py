"""The operator's console as a person sees it: Debian's chromium, headless, driven by Selenium
through Debian's chromedriver, on a real pair.

The module's pair is prepared as a night shift finds it: a cluster failed on ``id_conflict``
(another team's internal create took its ID while cluster_svc was away) with its rule failed
with it, a copy edited by hand in cluster_svc's database, and a cluster whose name is
``<img src=x onerror=alert(1)>`` (the API refuses such a name; a restore or a hand edit puts one
in a database all the same) with a rule whose description is the same markup. One browser and
one pair serve every test (the stalled row is made by the test that watches it, with
cluster_svc frozen).

Every page is saved as a PNG under the test's tmp folder, and under ``CONSOLE_SCREENSHOTS`` when
that names a folder.

Why Selenium and not Playwright for Python: measured on this machine (10 page loads, a form
post and a screenshot each, against Debian's chromium 156), Selenium with chromedriver took
6.8-7.1 s and at most about 1.0 GiB of resident memory in all its processes; Playwright, whose
driver is a Node.js process of its own, 8.2-8.4 s and about 1.45 GiB.
"""
from __future__ import annotations

import os
import re
import signal
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from sqlalchemy import text

from platform_svc.console.auth import create_operator
from tests.helpers import cluster_body
from tooling.packages import find, package_of
from tooling.pair import start_pair
from tooling.testing import wait_for

CLUSTERS = "/v1/clusters"
HOSTILE = "<img src=x onerror=alert(1)>"
# Chromium as a test needs it: no sandbox (root in CI), nothing fetched from the network by
# itself, a fresh profile (below).
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--window-size=1400,1300",
]


def _command(name: str) -> str:
    path = find(name)
    assert path, f"{name} is missing: install Debian's {package_of(name)} (make test installs it)"
    return path


class Browser:
    """One headless chromium, and what a test does with it: open a console page, read it, save it."""

    def __init__(self, base_url: str, workdir: Path) -> None:
        options = webdriver.ChromeOptions()
        options.binary_location = _command("chromium")
        for arg in [*CHROMIUM_ARGS, f"--user-data-dir={workdir / 'profile'}"]:
            options.add_argument(arg)
        options.unhandled_prompt_behavior = "ignore"  # an alert stays open, for the test to find
        service = Service(_command("chromedriver"), log_output=str(workdir / "chromedriver.log"))
        self.driver = webdriver.Chrome(options=options, service=service)
        self.base_url = base_url
        self.shots = [workdir / "screenshots"]
        if os.environ.get("CONSOLE_SCREENSHOTS"):
            self.shots.append(Path(os.environ["CONSOLE_SCREENSHOTS"]))
        for folder in self.shots:
            folder.mkdir(parents=True, exist_ok=True)

    def open(self, path: str) -> Browser:
        self.driver.get(self.base_url + path)
        return self

    @property
    def path(self) -> str:
        return self.driver.current_url.removeprefix(self.base_url)

    def text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text

    def html(self) -> str:
        return self.driver.page_source

    def press(self, xpath: str) -> None:
        """Click what ``xpath`` finds and wait for the page it leads to."""
        button = self.driver.find_element(By.XPATH, xpath)
        old = self.driver.find_element(By.TAG_NAME, "html")
        button.click()
        wait_for(lambda: _stale(old), timeout=30, what="the next page")

    def fill(self, name: str, value: str) -> None:
        field = self.driver.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)

    def screenshot(self, name: str) -> None:
        for folder in self.shots:
            self.driver.save_screenshot(str(folder / f"{name}.png"))

    def alert(self) -> str | None:
        """The text of an open alert dialog, if a script opened one."""
        try:
            return self.driver.switch_to.alert.text
        except NoAlertPresentException:
            return None

    def cookie(self, name: str) -> dict:
        return self.driver.get_cookie(name)

    def quit(self) -> None:
        self.driver.quit()


def _stale(element) -> bool:
    try:
        element.is_enabled()
    except Exception:  # noqa: BLE001 (selenium's StaleElementReferenceException: the page was replaced)
        return True
    return False


def set_name(pair, object_id: str, name: str) -> None:
    """A hand edit of a cluster's name in both databases (the API would refuse this one)."""
    for engine in (pair.platform_engine, pair.cluster_engine):
        with engine.begin() as conn:
            conn.execute(text("UPDATE clusters SET name = :name WHERE id = :id"), {"name": name, "id": object_id})


@pytest.fixture(scope="module")
def scene(pg_server_url, tmp_path_factory):
    """The module's pair, prepared as the module's docstring tells, its reconciler, and an operator."""
    workdir = tmp_path_factory.mktemp("console")
    pair = start_pair(pg_server_url, workdir, env={"SYNC_STALLED_AFTER_SECONDS": "1"})
    background = ExitStack()
    try:
        pair.use_account(pair.account("night shift", cli=False))
        made = {}
        hostile = pair.current.create(CLUSTERS, cluster_body(name="hostile"))
        made["hostile"] = hostile["id"]
        made["hostile_rule"] = pair.current.create(
            f"{CLUSTERS}/{hostile['id']}/firewall-rules", {"cidr": "10.9.0.0/16", "description": HOSTILE}
        )["id"]
        keyed = pair.api("POST", CLUSTERS, json=cluster_body(name="diverged", storage_gb=100),
                         headers={"Idempotency-Key": "night-shift-key-1"})
        assert keyed.status_code == 201, keyed.text
        made["diverged"] = keyed.json()["id"]
        wait_for(pair.all_synced, what="the first clusters synced")
        set_name(pair, made["hostile"], HOSTILE)
        with pair.cluster_engine.begin() as conn:  # a hand edit downstream: repair finds it diverged
            conn.execute(text("UPDATE clusters SET storage_gb = 999 WHERE id = :id"), {"id": made["diverged"]})

        pair.stop_cluster_svc(signal.SIGKILL)
        try:
            made["failed"] = pair.current.create(CLUSTERS, cluster_body(name="taken"))["id"]
            made["failed_rule"] = pair.current.create(
                f"{CLUSTERS}/{made['failed']}/firewall-rules", {"cidr": "10.8.0.0/16"}
            )["id"]
        finally:
            pair.restart_cluster_svc()
        squatter = {**cluster_body(name="theirs"), "id": made["failed"], "team_id": str(uuid.uuid4())}
        assert pair.internal("POST", CLUSTERS, json=squatter).status_code == 201
        # One reconciler for the module, as in production: it pushes (and fails) what is due, and holds
        # the lease on the periodic passes (its first repair pass would come after an hour) until a test stops it.
        background.enter_context(pair.reconciler("--repair-interval", "3600"))
        wait_for(lambda: pair.platform_row("firewall_rules", made["failed_rule"])["sync_state"] == "failed",
                 what="the conflicting cluster and its rule failed")

        with pair.platform_engine.begin() as conn:  # what `platform-svc create-operator` calls (tested on its own)
            made["operator"] = {"operator": "night-shift",
                                "secret": create_operator(db_session=conn, name="night-shift")}
        yield pair, made
    finally:
        try:
            background.close()
        finally:
            pair.stop()


@pytest.fixture(scope="module")
def browser(scene, tmp_path_factory):
    pair, _ = scene
    started = Browser(pair.platform_svc.url, tmp_path_factory.mktemp("chromium"))
    try:
        yield started
    finally:
        started.quit()


@pytest.fixture(scope="module")
def logged_in(browser, scene):
    """The browser after logging in through the form, as the operator made by ``create-operator``."""
    _, made = scene
    log_in(browser, made["operator"])
    return browser


def log_in(browser: Browser, operator: dict[str, str]) -> None:
    browser.open("/console/")
    assert browser.path.startswith("/console/login"), browser.path
    browser.screenshot("login")
    browser.fill("operator", operator["operator"])
    browser.fill("secret", operator["secret"])
    browser.press("//button[text()='Log in']")


def row_xpath(object_id: str) -> str:
    return f"//tr[.//code[text()='{object_id}']]"


def test_logging_in_opens_the_overview_with_the_counts_drawn(logged_in, scene):
    browser = logged_in

    assert browser.path == "/console/", browser.path
    page = browser.text()
    assert "night-shift" in page and "Overview" in page
    cookie = browser.cookie("console_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    bars = browser.driver.find_elements(By.CSS_SELECTOR, "svg.bar")
    assert len(bars) == 2  # one per resource
    failed = browser.driver.find_elements(By.CSS_SELECTOR, "svg.bar rect.failed")
    assert len(failed) == 2  # the failed cluster, and its rule failed with it
    assert "Inline-push breaker" in page and "per process" in page
    assert re.search(r"Reconciler's last pass\n.* ago by .*: reconciled \d+ rows in \d+ pushes: .*failed", page), page
    browser.screenshot("overview")


def test_the_failed_row_shows_its_reason_and_a_retry_refuses_another_teams_object(logged_in, scene):
    browser, (_, made) = logged_in, scene

    browser.open("/console/rows?resource=clusters")

    row = browser.driver.find_element(By.XPATH, row_xpath(made["failed"])).text
    assert "failed" in row and "409 id_conflict" in row
    browser.screenshot("rows-failed")
    browser.press(row_xpath(made["failed"]) + "//button[text()='Retry']")
    page = browser.text()
    assert "2 left failed" in page  # the cluster, and its rule with it: it never waits for a cluster left failed
    assert "is failed; it goes back in line with that cluster" in page
    refused = browser.driver.find_element(By.XPATH, row_xpath(made["failed"])).text
    assert "left failed" in refused and "not the platform's object" in refused and "team_id" in refused
    browser.screenshot("retry-refused")


def test_a_stalled_row_shows_while_cluster_svc_is_frozen_and_syncs_once_it_is_back(logged_in, scene):
    browser, (pair, _) = logged_in, scene
    with pair.frozen_cluster_svc():
        stalled = pair.current.create(CLUSTERS, cluster_body(name="stalled"))["id"]
        assert stalled and pair.platform_row("clusters", stalled)["sync_state"] == "pending"

        def shown_stalled():
            browser.open("/console/rows?resource=clusters&state=stalled")
            rows = browser.driver.find_elements(By.XPATH, row_xpath(stalled))
            return rows and rows[0].text

        row = wait_for(shown_stalled, timeout=15, what="the row shown stalled")
        assert "stalled" in row
        browser.screenshot("rows-stalled")

    wait_for(lambda: "Sync state\nsynced" in browser.open(f"/console/objects/clusters/{stalled}").text(),
             timeout=30, what="the stalled row synced by the reconciler once cluster_svc is back")


def test_abandon_in_the_browser_closes_the_id_conflict_row_and_its_rule_and_leaves_theirs_alone(logged_in, scene):
    browser, (pair, made) = logged_in, scene
    browser.open(f"/console/objects/clusters/{made['failed']}")
    assert "Sync state\nfailed" in browser.text() and "another object under this ID" in browser.text()

    browser.press("//form//button[text()='Abandon…']")
    assert "Abandon cluster" in browser.text() and "cannot be undone" in browser.text()  # it asks first
    assert made["failed_rule"] in browser.text()  # naming what it would close
    browser.screenshot("abandon-confirm")
    browser.press("//form//button[text()='Abandon']")

    assert "Abandoned: 2 rows closed" in browser.text(), browser.text()  # the cluster and its rule
    browser.screenshot("abandoned")
    page = browser.open(f"/console/objects/clusters/{made['failed']}").text()
    assert "Sync state\nabandoned" in page  # its own state, never "synced"
    assert not browser.driver.find_elements(By.CSS_SELECTOR, "table.sides tr.differs")  # theirs is not compared
    assert "(deleted) abandoned" in page.split("Firewall rules under it")[1]  # its rule too
    rule = pair.platform_row("firewall_rules", made["failed_rule"])
    assert (rule["abandoned_at"] is not None, rule["deleted_at"] is not None) == (True, True)
    gone = pair.api("GET", f"{CLUSTERS}/{made['failed']}")
    assert gone.status_code == 410 and "abandoned by an operator" in gone.json()["detail"], gone.text
    assert "id_conflict" in gone.json()["detail"] and "night-shift" not in gone.json()["detail"]  # why, not who
    browser.open("/console/rows?resource=clusters&state=abandoned")
    assert browser.driver.find_elements(By.XPATH, row_xpath(made["failed"]))  # listed as abandoned
    browser.open("/console/")
    assert "abandoned" in browser.text()
    theirs = pair.internal("GET", f"{CLUSTERS}/{made['failed']}").json()
    assert theirs["name"] == "theirs" and theirs["deleted_at"] is None  # the other team's object, untouched
    browser.open("/console/rows?resource=clusters&state=failed")
    assert not browser.driver.find_elements(By.XPATH, row_xpath(made["failed"]))  # nothing left for a person
    assert pair.cli("repair", "--dry-run").returncode == 0  # and repair finds nothing to say of it
    browser.screenshot("rows-after-abandon")


def test_the_diverged_copy_is_marked_on_its_page(logged_in, scene):
    browser, (_, made) = logged_in, scene

    browser.open(f"/console/objects/clusters/{made['diverged']}")

    differs = [row.text for row in browser.driver.find_elements(By.CSS_SELECTOR, "table.sides tr.differs")]
    assert len(differs) == 1 and differs[0].startswith("storage_gb 100 999 differs"), differs
    assert "Repair would find\ndiverged" in browser.text()
    assert "Idempotency-Key\nnight-shift-key-1" in browser.text()
    browser.screenshot("object-diverged")


def test_a_repair_dry_run_from_the_page_names_the_diverged_field(logged_in, scene):
    browser, (pair, made) = logged_in, scene
    browser.open("/console/repair")

    browser.press("//button[text()='Start a dry run']")

    assert browser.path.startswith("/console/repair/")
    run = browser.path

    def finished():
        browser.open(run)
        return "finished" in browser.text()

    wait_for(finished, timeout=30, what="the dry run finished")
    finding = browser.driver.find_element(By.XPATH, row_xpath(made["diverged"])).text
    assert "diverged" in finding and "storage_gb" in finding
    assert re.search(r"compared (\d+) of \1", browser.text()), browser.text()
    browser.screenshot("repair-dry-run")
    assert pair.platform_row("clusters", made["diverged"])["sync_state"] == "synced"  # a dry run changes nothing


def test_a_real_run_from_the_page_is_run_by_the_reconciler_holding_the_lease_and_repairs(logged_in, scene):
    browser, (pair, made) = logged_in, scene
    holder = wait_for(lambda: lease_holder(pair), what="the reconciler holding the lease on the periodic passes")
    browser.open("/console/repair")

    browser.press("//button[text()='Start a real run…']")
    browser.press("//button[text()='Start the real run']")

    run = browser.path

    def finished():
        browser.open(run)
        return "finished" in browser.text()

    wait_for(finished, timeout=30, what="the real run finished by the reconciler")
    assert holder in browser.text()  # run by the reconciler that leads, not by the web worker
    assert "diverged" in browser.driver.find_element(By.XPATH, row_xpath(made["diverged"])).text
    assert "dry run" not in browser.text()
    browser.screenshot("repair-real-run")
    wait_for(lambda: pair.cluster_row("clusters", made["diverged"])["storage_gb"] == 100,
             what="the platform's value pushed again by the reconciler")
    browser.open("/console/")
    assert re.search(r"Last repair pass\n.* ago by .*: repair: .*1 diverged", browser.text()), browser.text()


def lease_holder(pair) -> str | None:
    with pair.platform_engine.connect() as conn:
        return conn.execute(text("SELECT holder FROM leases WHERE name = 'periodic-passes' AND expires_at > now()")).scalar()


def test_during_an_outage_the_object_page_answers_within_2_s_and_the_overview_says_cluster_svc_is_not_answering(
    logged_in, scene
):
    browser, (pair, made) = logged_in, scene
    with pair.frozen_cluster_svc():  # SIGSTOP: connections accepted, nothing answered
        started = time.monotonic()
        page = browser.open(f"/console/objects/clusters/{made['diverged']}").text()
        took = time.monotonic() - started
        browser.screenshot("outage-object")
        try:
            overview = wait_for(lambda: "Not answering" in browser.open("/console/").text() and browser.text(),
                                timeout=15, what="the overview saying cluster_svc does not answer")
        except TimeoutError as exc:  # what it said instead, and what each process had written
            with pair.platform_engine.connect() as conn:
                written = conn.exec_driver_sql("SELECT observer, served, seen_at, what FROM cluster_svc_sightings").all()
            raise AssertionError(f"{exc}: {browser.text()}\n{written}") from exc
        browser.screenshot("outage-overview")
    wait_for(lambda: pair.internal("GET", f"{CLUSTERS}?limit=1").status_code == 200, what="cluster_svc thawed")

    assert took < 3, took  # the console's own 2 s, and the page around it
    assert "diverged" in page and "night-shift-key-1" in page  # the platform's side, all of it
    assert "cluster_svc did not answer" in page and "no row" not in page
    assert re.search(r"Not answering: the last call did not get an answer \d+s ago", overview), overview


def test_a_hostile_name_and_description_render_as_text(logged_in, scene):
    browser, (_, made) = logged_in, scene

    for name, path in (("object-hostile", f"/console/objects/clusters/{made['hostile']}"),
                       ("object-hostile-rule", f"/console/objects/firewall-rules/{made['hostile_rule']}")):
        browser.open(path)
        assert HOSTILE in browser.text()
        assert browser.driver.find_elements(By.TAG_NAME, "img") == []
        assert browser.alert() is None
        browser.screenshot(name)


def test_without_a_session_or_the_csrf_token_nothing_is_done(logged_in, scene):
    browser, (pair, _) = logged_in, scene
    url = pair.platform_svc.url
    with requests.Session() as session:
        session.cookies.set("console_session", browser.cookie("console_session")["value"])
        forged = session.post(f"{url}/console/retry", data={"resource": "clusters", "reason": "id_conflict"},
                              allow_redirects=False)
        page = session.get(f"{url}/console/rows", allow_redirects=False)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        genuine = session.post(f"{url}/console/retry", allow_redirects=False,
                               data={"resource": "clusters", "reason": "no such reason", "csrf_token": token})
    for who in (pair.api_key, pair.token):
        opened = requests.get(f"{url}/console/", headers={"Authorization": f"Bearer {who}"}, allow_redirects=False)
        assert opened.status_code == 302 and opened.headers["Location"].startswith("/console/login")
    bare = requests.post(f"{url}/console/retry", data={"csrf_token": token, "reason": "x"}, allow_redirects=False)

    assert forged.status_code == 400 and "CSRF token" in forged.text
    assert genuine.status_code == 200 and "No failed row matched" in genuine.text  # the same session, with its token
    assert bare.status_code == 401
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    browser.driver.delete_all_cookies()
    browser.open("/console/rows")
    assert browser.path.startswith("/console/login")


# On a phone and on a desktop ------------------------------------------------------------------

LAYOUTS = {"phone": (390, 844), "desktop": (1280, 800)}
# The page's width against the window's, the tallest table row, and every control not wholly on
# screen sideways (what a phone user could not reach without scrolling the page).
MEASURE = """
const width = document.documentElement.clientWidth;
const heights = [...document.querySelectorAll('tr')].map(row => row.getBoundingClientRect().height);
const off = [...document.querySelectorAll('button, a, input:not([type=hidden]), select')].filter(e => {
  const box = e.getBoundingClientRect();
  return box.width > 0 && (box.left < 0 || box.right > width + 1);
}).map(e => e.outerHTML.slice(0, 100));
return {page: document.documentElement.scrollWidth, width: width, tallest: Math.max(0, ...heights), off: off};
"""


def test_every_page_fits_a_phone_and_a_desktop_with_every_kind_of_row(logged_in, scene):
    browser, (pair, made) = logged_in, scene
    browser.driver.delete_all_cookies()  # whatever an earlier test left: a login of its own
    log_in(browser, made["operator"])
    pages = {"overview": "/console/", "rows": "/console/rows?resource=clusters",
             **{f"rows-{state}": f"/console/rows?resource=clusters&state={state}"
                for state in ("pending", "stalled", "failed", "abandoned")},
             "rules": "/console/rows?resource=firewall-rules&state=failed",
             "object-abandoned": f"/console/objects/clusters/{made['failed']}",
             "object-hostile": f"/console/objects/clusters/{made['hostile']}", "repair": "/console/repair"}
    measured = {}
    pair.stop_cluster_svc(signal.SIGKILL)  # an outage: rows pending and stalled, cluster_svc not answering
    try:
        waiting = [pair.api("POST", CLUSTERS, json=cluster_body(name=f"waiting-{n}")).json()["id"] for n in range(2)]
        pages["object-pending"] = f"/console/objects/clusters/{waiting[0]}"
        for layout, (width, height) in LAYOUTS.items():
            browser.driver.set_window_size(width, height)
            for name, path in pages.items():
                measured[layout, name] = browser.open(path).driver.execute_script(MEASURE)
                browser.screenshot(f"{layout}-{name}")
    finally:
        browser.driver.set_window_size(1400, 1300)
        pair.restart_cluster_svc()

    assert measured["phone", "overview"]["width"] <= 400 < measured["desktop", "overview"]["width"]
    for (layout, name), seen in measured.items():
        assert seen["page"] <= seen["width"], f"{layout} {name}: the page scrolls sideways: {seen}"
        assert seen["tallest"] <= 250, f"{layout} {name}: a table row {seen['tallest']} px tall"
        assert seen["off"] == [], f"{layout} {name}: controls off screen: {seen['off']}"


def test_logging_out_in_the_browser_ends_the_session_a_copied_cookie_with_it(logged_in, scene):
    browser, (pair, made) = logged_in, scene
    browser.driver.delete_all_cookies()  # whatever an earlier test left: a login of its own
    log_in(browser, made["operator"])
    copied = browser.cookie("console_session")["value"]

    browser.press("//button[text()='Log out']")

    assert browser.path.startswith("/console/login")
    replayed = requests.get(f"{pair.platform_svc.url}/console/", cookies={"console_session": copied},
                            allow_redirects=False)
    assert replayed.status_code == 302 and replayed.headers["Location"].startswith("/console/login")


def test_the_api_docs_render_under_their_content_security_policy(browser):
    """/docs shares the console's origin, so it runs only its own files and its one inline script
    (shared.apidocs): Swagger UI still draws every operation in a real browser."""
    browser.open("/docs")
    wait_for(lambda: browser.driver.find_elements(By.CSS_SELECTOR, ".opblock"), timeout=30, what="the operations drawn")
    browser.screenshot("api-docs")
    assert "platform_svc" in browser.text() and "/v1/clusters" in browser.text()
