"""schemathesis 4 run against both services as a caller's tooling would run it: its own CLI, every
check, every phase (examples, coverage, fuzzing, and stateful: the links it infers from one
answer to the next request), told only what ``schemathesis.toml`` and ``tooling.fuzzing`` tell it.
It finds no 5xx, no answer outside the document, and no schema-valid request refused but for the
refusals the contract itself documents: an object's 404 and a deleted ID's 410
(``schemathesis.toml``), a batch's invalid item answered in its place, and a reused
Idempotency-Key (the coverage phase sends one key, "0", with every body it tries, and applies no
hook: each such finding is read, and must be that refusal).

A pair of its own: the internal API's fuzzed writes reach whatever objects a listing shows it."""
from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path
from xml.etree import ElementTree

from platform_svc.api import auth
from tooling.testing import ROOT, console_script

PHASES = ("examples", "coverage", "fuzzing", "stateful")


def schemathesis_run(url: str, credential: str, reports: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [console_script("schemathesis"), "--config-file", str(ROOT / "schemathesis.toml"), "--no-color", "run",
         f"{url}/openapi.json", "-H", f"Authorization: Bearer {credential}", "--phases", ",".join(PHASES),
         "--max-examples", "5", "--seed", "1", "--report", "junit", "--report-dir", str(reports)],
        # Run where its cache (.schemathesis/) is the test's own, not the checkout's.
        env={**os.environ, "SCHEMATHESIS_HOOKS": "tooling.fuzzing",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
        cwd=reports.parent,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def findings(reports: Path) -> list[tuple[str, str]]:
    """Each failed case of the run's JUnit report: (operation, what schemathesis says of it)."""
    [report] = reports.glob("*.xml")
    return [(case.get("name", ""), found)
            for case in ElementTree.parse(report).iter("testcase")
            for failure in case.iter("failure")
            for found in re.split(r"^\d+\. Test Case ID: ", failure.text or "", flags=re.MULTILINE) if found.strip()]


def documented(finding: str) -> bool:
    """A valid request refused only because its key went with another body before: the contract's 422."""
    checks = set(re.findall(r"^- (ST\d+)", finding, flags=re.MULTILINE))
    return checks == {"ST202"} and '"code": "idempotency_key_reused"' in finding


def test_schemathesis_finds_nothing_in_either_service(fresh_pair, tmp_path):
    with fresh_pair.platform_engine.begin() as conn:  # its requests are many: the account's limit is no finding
        auth.set_rate_limit(db_session=conn, account_id=uuid.UUID(fresh_pair.account_id), limit=100_000)
    runs = {"platform_svc": schemathesis_run(fresh_pair.platform_svc.url, fresh_pair.api_key, tmp_path / "platform"),
            "cluster_svc": schemathesis_run(fresh_pair.cluster_svc.url, fresh_pair.token, tmp_path / "cluster")}

    outputs = {service: run.communicate(timeout=240)[0] for service, run in runs.items()}

    for service, run in runs.items():
        output = outputs[service]
        summary = output[output.rfind("SUMMARY"):]
        found = findings(tmp_path / ("platform" if service == "platform_svc" else "cluster"))
        assert [f"{operation}: {finding}" for operation, finding in found if not documented(finding)] == [], output
        assert run.returncode == (1 if found else 0), f"{service}:\n{output[-6000:]}"  # and no error of its own
        assert all(f"✅ {phase.title()}" in summary or f"❌ {phase.title()}" in summary for phase in PHASES[1:]), \
            f"{service}: {summary}"
        assert re.search(r"\d+ generated", summary), summary
