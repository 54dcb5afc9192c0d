"""The client distribution (client/: idempotent-pair-client) as another service gets it: what it
depends on, what importing it loads, that it says it is typed, and a fresh virtualenv with it alone."""
from __future__ import annotations

import json
import re
import subprocess
import sys

HEAVY = ("flask", "werkzeug", "flask_smorest", "sqlalchemy", "alembic", "marshmallow", "gevent", "psycopg2",
         "psycogreen", "prometheus_client", "requests")


def test_importing_the_clients_loads_no_service_stack():
    """A caller's process needs urllib3 and uuid6, nothing of the services' web or database stack."""
    program = (
        "import json, sys\n"
        "from idempotent_pair_client.platform import PlatformClient, ProblemError\n"
        "from idempotent_pair_client.cluster import ClusterClient\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    loaded = set(json.loads(subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    ).stdout))

    assert loaded & set(HEAVY) == set()
    third_party = {name for name in loaded - set(sys.stdlib_module_names) if not name.startswith("_")}
    assert third_party == {"idempotent_pair_client", "urllib3", "uuid6"}


def test_the_client_distribution_depends_on_neither_the_web_nor_the_database_stack():
    """What ``pip install ./client`` brings into a caller's environment: its two dependencies, nothing else."""
    import tomllib
    from pathlib import Path

    import idempotent_pair_client

    project = tomllib.loads((Path(__file__).parents[2] / "client" / "pyproject.toml").read_text())["project"]
    required = {re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0].lower() for requirement in project["dependencies"]}

    assert project["name"] == "idempotent-pair-client" and project["version"] == idempotent_pair_client.__version__
    assert required == {"urllib3", "uuid6"}


def test_the_packages_say_they_are_typed():
    from pathlib import Path

    import idempotent_pair_client

    import cluster_svc
    import platform_svc
    import shared

    for package in (shared, platform_svc, cluster_svc, idempotent_pair_client):
        assert (Path(package.__file__).parent / "py.typed").is_file()



def test_the_client_distribution_installs_alone_into_a_fresh_virtualenv(tmp_path):
    """What another service gets from ``pip install ./client``: the client, urllib3 and uuid6, nothing else."""
    from pathlib import Path

    venv = tmp_path / "venv"  # without pip of its own: this pip installs into it (--python), and lists it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    installed = subprocess.run([*pip, "install", "--quiet", str(Path(__file__).parents[2] / "client")],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    frozen = subprocess.run([*pip, "freeze"], capture_output=True, text=True, check=True, timeout=60).stdout
    names = {re.split(r"[=@ ]", line, maxsplit=1)[0].strip().lower() for line in frozen.splitlines() if line.strip()}

    assert names == {"idempotent-pair-client", "urllib3", "uuid6"}
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", "import idempotent_pair_client"], timeout=60)
    assert imported.returncode == 0
