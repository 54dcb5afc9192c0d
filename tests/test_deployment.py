"""docker-compose.yml runs the pair the way `make run` does, watched by Prometheus.

No Docker engine runs here, so the file is checked as far as that allows:
`docker-compose config` (Debian's docker-compose, which make test installs)
validates it against the Compose schema, and the assertions below check that
it wires what the run contract asks for. The Prometheus configuration and
alert rules it ships are checked by promtool (Debian's prometheus package).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tooling.testing import installed

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_SECRETS = {"INTERNAL_TOKEN": "compose-test-token", "GRAFANA_ADMIN_PASSWORD": "compose-test-password"}


def _compose_config(environ):
    binary = installed("docker-compose")
    return subprocess.run([binary, "config", "-q"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)


def _promtool():
    return installed("promtool")


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_is_valid():
    result = _compose_config({**os.environ, **COMPOSE_SECRETS})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("missing", sorted(COMPOSE_SECRETS))
def test_compose_refuses_to_start_without_its_secrets(missing):
    environ = {k: v for k, v in {**os.environ, **COMPOSE_SECRETS}.items() if k != missing}

    result = _compose_config(environ)

    assert result.returncode != 0
    assert missing in result.stderr
    assert "change-me" not in (ROOT / "docker-compose.yml").read_text()


def test_compose_runs_postgres_both_services_the_reconciler_and_their_monitoring(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "cluster", "platform", "reconciler", "purge", "prometheus", "grafana"}
    assert "migrate" in " ".join(services["cluster"]["command"])
    assert "cluster-svc serve --port 8001" in " ".join(services["cluster"]["command"])
    assert "platform-svc serve --port 8000" in " ".join(services["platform"]["command"])
    assert services["reconciler"]["command"] == ["platform-svc", "reconcile", "--metrics-port", "9100"]
    assert services["purge"]["command"] == ["cluster-svc", "purge", "--every", "3600"]


def test_compose_health_checks_ask_for_readiness(compose):
    for name in ("cluster", "platform"):
        assert "/readyz" in " ".join(compose["services"][name]["healthcheck"]["test"]), name


def test_prometheus_scrapes_all_three_with_the_token_it_is_given(compose):
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["platform_svc"]["static_configs"][0]["targets"] == ["platform:8000"]
    assert jobs["cluster_svc"]["static_configs"][0]["targets"] == ["cluster:8001"]
    assert jobs["reconciler"]["static_configs"][0]["targets"] == ["reconciler:9100"]
    token_file = "/prometheus/internal_token"
    for name in ("platform_svc", "cluster_svc"):
        assert jobs[name]["authorization"] == {"type": "Bearer", "credentials_file": token_file}
    prometheus = compose["services"]["prometheus"]
    # The first of several comma-separated tokens, as every caller presents it (a rotation in progress).
    assert f'"$${{INTERNAL_TOKEN%%,*}}" > {token_file}' in " ".join(prometheus["command"])
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]


ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_CASES = ROOT / "deploy" / "prometheus" / "alerts_test.yml"


def shipped_alerts() -> set[str]:
    return {rule["alert"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}


def alert_cases() -> list[dict]:
    return yaml.safe_load(ALERT_CASES.read_text())["tests"]


def test_the_shipped_alert_rules_pass_promtool():
    result = subprocess.run([_promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(shipped_alerts())} rules found" in result.stdout


@pytest.mark.parametrize("case", alert_cases(), ids=lambda case: case["name"])
def test_the_shipped_alerts_do_what_their_case_says(case, tmp_path):
    """One group of deploy/prometheus/alerts_test.yml, alone, through ``promtool test rules``:
    each situation passes or fails on its own (the file as a whole is one exit status)."""
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    (tmp_path / "alerts_test.yml").write_text(
        yaml.safe_dump({**yaml.safe_load(ALERT_CASES.read_text()), "tests": [case]})
    )

    result = subprocess.run(
        [_promtool(), "test", "rules", "alerts_test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_every_shipped_alert_has_a_case_where_it_fires_and_one_where_it_stays_quiet():
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in alert_cases():
        checked = {check["alertname"] for check in case["alert_rule_test"]}
        firing = {check["alertname"] for check in case["alert_rule_test"] if check["exp_alerts"]}
        fires |= firing
        quiet |= checked - firing  # a group where it never fires (not the "not yet" of one where it does)

    assert fires == shipped_alerts()
    assert quiet == shipped_alerts()


def test_the_shipped_prometheus_config_passes_promtool(tmp_path):
    # The token file exists only inside the container; point at a stand-in.
    shipped = ROOT / "deploy" / "prometheus"
    token = tmp_path / "internal_token"
    token.write_text("stand-in")
    config = (shipped / "prometheus.yml").read_text()
    assert config.count("credentials_file: /prometheus/internal_token") == 2
    (tmp_path / "prometheus.yml").write_text(config.replace("/prometheus/internal_token", str(token)))
    shutil.copy(shipped / "alerts.yml", tmp_path / "alerts.yml")

    result = subprocess.run(
        [_promtool(), "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_is_provisioned_with_the_datasource_and_a_dashboard_of_every_signal(compose):
    grafana = ROOT / "deploy" / "grafana"
    datasource = yaml.safe_load((grafana / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    dashboard = json.loads((grafana / "dashboards" / "idempotent-pair.json").read_text())
    queries = " ".join(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])
    for metric in (
        "http_requests_total",
        "http_request_duration_seconds_bucket",
        "idempotent_creates_total",
        "sync_rows",
        "sync_oldest_pending_seconds",
        "sync_pushes_total",
        "sync_repairs_total",
        "tombstones",
        "tombstone_oldest_seconds",
        "id_horizon_seconds",
    ):
        assert metric in queries, metric
    assert any("/var/lib/grafana/dashboards" in volume for volume in compose["services"]["grafana"]["volumes"])


def test_compose_gives_every_process_the_settings_it_requires(compose):
    services = compose["services"]
    required = {
        "cluster": {"CLUSTER_DATABASE_URL", "INTERNAL_TOKEN"},
        "platform": {"PLATFORM_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN"},
        "reconciler": {"PLATFORM_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN"},
        "purge": {"CLUSTER_DATABASE_URL"},
    }
    for name, names in required.items():
        environment = services[name]["environment"]
        assert names <= set(environment), name
        assert all(
            environment[var].startswith("postgresql+psycopg2://") for var in names if var.endswith("DATABASE_URL")
        )
    assert services["platform"]["environment"]["CLUSTER_SVC_URL"] == "http://cluster:8001"
    # Both services (and the reconciler and purge) must agree on the ID horizon.
    horizons = {services[name]["environment"]["ID_HORIZON_SECONDS"] for name in ("cluster", "platform", "reconciler", "purge")}
    assert len(horizons) == 1


def test_compose_creates_one_database_per_service():
    sql = (ROOT / "docker" / "postgres-init.sql").read_text()
    assert "CREATE DATABASE cluster;" in sql
    assert "CREATE DATABASE platform;" in sql


def test_image_installs_the_console_scripts():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("shared", "cluster_svc", "platform_svc"):
        assert f"COPY {package} {package}" in dockerfile
    assert "pip install --no-cache-dir ." in dockerfile
