"""docker-compose.yml runs the pair the way `make run` does.

No Docker engine runs here, so the file is checked as far as that allows:
`docker-compose config` (Debian's docker-compose, which .ci/run installs)
validates it against the Compose schema, and the assertions below check that
it wires what the run contract asks for.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def compose_config(**env: str) -> subprocess.CompletedProcess:
    """`docker-compose config -q` with exactly these settings (and PATH) in its environment."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (.ci/run installs it from Debian's packages)")
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    return subprocess.run(
        [binary, "config", "-q"], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )


def test_compose_file_is_valid():
    result = compose_config(INTERNAL_TOKEN="a-token-for-the-check")
    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_start_without_an_internal_token():
    """No default token: a deployment that forgot to set one must not come up with a guessable one."""
    result = compose_config()

    assert result.returncode != 0
    assert "INTERNAL_TOKEN" in result.stderr
    assert "change-me" not in (ROOT / "docker-compose.yml").read_text()


def test_compose_runs_postgres_both_services_and_the_reconciler(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "cluster", "platform", "reconciler"}
    assert "migrate" in " ".join(services["cluster"]["command"])
    assert "cluster-svc serve --port 8001" in " ".join(services["cluster"]["command"])
    assert "platform-svc serve --port 8000" in " ".join(services["platform"]["command"])
    assert services["reconciler"]["command"] == ["platform-svc", "reconcile"]


def test_compose_gives_every_process_the_settings_it_requires(compose):
    services = compose["services"]
    required = {
        "cluster": {"CLUSTER_DATABASE_URL", "INTERNAL_TOKEN"},
        "platform": {"PLATFORM_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN"},
        "reconciler": {"PLATFORM_DATABASE_URL", "CLUSTER_SVC_URL", "INTERNAL_TOKEN"},
    }
    for name, names in required.items():
        environment = services[name]["environment"]
        assert names <= set(environment), name
        assert all(
            environment[var].startswith("postgresql+psycopg2://") for var in names if var.endswith("DATABASE_URL")
        )
    assert services["platform"]["environment"]["CLUSTER_SVC_URL"] == "http://cluster:8001"


def test_compose_creates_one_database_per_service():
    sql = (ROOT / "docker" / "postgres-init.sql").read_text()
    assert "CREATE DATABASE cluster;" in sql
    assert "CREATE DATABASE platform;" in sql


def test_image_installs_the_console_scripts():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("shared", "cluster_svc", "platform_svc"):
        assert f"COPY {package} {package}" in dockerfile
    assert "pip install --no-cache-dir ." in dockerfile
