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
    assert f'"$$INTERNAL_TOKEN" > {token_file}' in " ".join(prometheus["command"])
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]


def test_the_shipped_alert_rules_pass_promtool():
    result = subprocess.run(
        [_promtool(), "check", "rules", str(ROOT / "deploy" / "prometheus" / "alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 rules found" in result.stdout


def promtool_test_rules(tmp_path, tests: list[dict]) -> subprocess.CompletedProcess:
    """``promtool test rules`` over the shipped alert rules with these test cases."""
    shutil.copy(ROOT / "deploy" / "prometheus" / "alerts.yml", tmp_path / "alerts.yml")
    cases = {"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(cases))
    return subprocess.run(
        [_promtool(), "test", "rules", "alerts_test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def shipped_annotations(alert: str) -> dict:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
    return next(rule for rule in rules if rule["alert"] == alert)["annotations"]


def test_the_repair_leader_alert_fires_when_no_reconciler_or_two_lead_for_five_minutes(tmp_path):
    # Two reconcilers: one leads, then the leader dies (none for 6 minutes), then both claim it.
    series = [
        {"series": 'sync_repair_leader{instance="a"}', "values": "1x5 0x6 1x6"},
        {"series": 'sync_repair_leader{instance="b"}', "values": "0x5 0x6 1x6"},
    ]
    annotations = shipped_annotations("RepairLeaderNotOne")

    def firing(leaders: int) -> list[dict]:
        summary = annotations["summary"].replace("{{ $value }}", str(leaders))
        return [{"exp_labels": {"severity": "warning"},
                 "exp_annotations": {"summary": summary, "description": annotations["description"]}}]

    expected = [
        {"eval_time": "4m", "alertname": "RepairLeaderNotOne", "exp_alerts": []},
        {"eval_time": "8m", "alertname": "RepairLeaderNotOne", "exp_alerts": []},  # none for 3 minutes: not yet
        {"eval_time": "11m", "alertname": "RepairLeaderNotOne", "exp_alerts": firing(0)},
        {"eval_time": "17m", "alertname": "RepairLeaderNotOne", "exp_alerts": firing(2)},
    ]

    result = promtool_test_rules(tmp_path, [{"interval": "1m", "input_series": series, "alert_rule_test": expected}])

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tombstone_alert_fires_when_purge_stops_and_only_then(tmp_path):
    # An hour's horizon: the alert fires once the oldest tombstone is 3 hours old (horizon + 2 h)
    # for 10 minutes. A tombstone age growing a minute a minute (purge stopped) fires it for its
    # resource only; one that purge keeps cutting back (under the horizon plus an interval) never does.
    series = [
        {"series": "id_horizon_seconds", "values": "3600x300"},
        {"series": 'tombstone_oldest_seconds{resource="cluster"}', "values": "0+60x300"},
        # purge every hour: the oldest is never more than horizon + grace + an hour old
        {"series": 'tombstone_oldest_seconds{resource="firewall_rule"}', "values": " ".join(["3600+60x60"] * 5)},
    ]
    summary = "The oldest cluster tombstone is more than 2 hours past the ID horizon"
    description = shipped_annotations("TombstonesOutliveTheHorizon")["description"]
    expected = [
        {"eval_time": "185m", "alertname": "TombstonesOutliveTheHorizon", "exp_alerts": []},
        {
            "eval_time": "195m",
            "alertname": "TombstonesOutliveTheHorizon",
            "exp_alerts": [
                {
                    "exp_labels": {"severity": "warning", "resource": "cluster"},
                    "exp_annotations": {"summary": summary, "description": description},
                }
            ],
        },
    ]

    result = promtool_test_rules(tmp_path, [{"interval": "1m", "input_series": series, "alert_rule_test": expected}])

    assert result.returncode == 0, result.stdout + result.stderr


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
