"""The structure the code promises (docs/design.md, "Where things are"):
shared knows neither service, the services never import each other, no two
modules import each other (directly or around a longer loop, an import made only
for the type checker included) anywhere in the runtime, the tooling, the
benchmarks or the callers' client, and outside the resources' declarations and
models nothing names a resource, in any spelling: the machinery (and the
tooling) reads everything from the registry.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tooling.testing import ROOT

PACKAGES = ("shared", "cluster_svc", "platform_svc", "tooling")
# Every package the import graph follows, and the folder it lies in.
GRAPHED = {package: ROOT for package in (*PACKAGES, "bench")} | {"idempotent_pair_client": ROOT / "client"}
# Where resources are declared, and the models that hold them; everything else goes through the registry.
DECLARATIONS = {"shared/contract.py", "cluster_svc/models.py", "platform_svc/models.py"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in GRAPHED.items():
        for path in (folder / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(folder).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports anywhere: deferred imports in functions too, and those
    under ``if TYPE_CHECKING:`` (a loop the type checker follows is a loop a reader follows)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph():
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def test_no_module_imports_itself_around_a_loop(graph):
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_an_import_made_only_for_the_type_checker_is_in_the_graph(tmp_path):
    typed = tmp_path / "typed.py"
    typed.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tooling.ha import Topology\n")
    known = modules()
    assert imports(typed, known) == {"tooling.ha"}
    assert "idempotent_pair_client.transport" in known and "bench.layers" in known


def test_shared_imports_neither_service_and_the_services_never_import_each_other(graph):
    def reaches(name: str, package: str) -> list[str]:
        return sorted(other for other in graph[name] if other.split(".")[0] == package)

    for name in graph:
        package = name.split(".")[0]
        if package == "shared" and name != "shared.entrypoints":  # the console scripts start the services
            assert reaches(name, "cluster_svc") == reaches(name, "platform_svc") == [], name
        if package == "cluster_svc":
            assert reaches(name, "platform_svc") == [], name
        if package == "platform_svc":
            assert reaches(name, "cluster_svc") == [], name


# Every spelling of the shipped resources, in any case: singular and plural, the path segment,
# the words of a message, the parent column and path variable, the camel-case schema names, and
# the root's owner column. The services' own names (cluster_svc, cluster-svc, CLUSTER_SVC_URL,
# cluster_db_url, ...) are not a resource's: "cluster" joined by "_" or "-" to a word that is not
# "id" names the service.
NAMES_A_RESOURCE = re.compile(
    r"(?<![a-z0-9])(?:clusters|cluster(?:_id)?(?![a-z0-9_-])|firewall[ _-]?rules?|rule_id|team[ _]?id)(?![a-z0-9])"
    r"|(?-i:(?<![a-z])(?:Cluster|FirewallRule)(?=[A-Z]|$))",
    re.IGNORECASE,
)
# Other programs' vocabulary, which the tooling must spell as they do.
THEIRS = {
    "/cluster": "Patroni's REST API: the members of a Patroni cluster",
    "--initial-cluster": "etcd's flag naming the members of its own cluster",
}


@pytest.mark.parametrize(
    "word",
    ["cluster", "Clusters", "CLUSTER", "cluster_id", "/v1/clusters?limit=1", "firewall_rule", "FIREWALL_RULES",
     "firewall-rules", "firewall rules", "Firewall rule", "FirewallRuleOut", "ClusterCreate", "rule_id", "team_id",
     "a cluster's name", "ix_clusters_team_id_live"],
)
def test_the_pattern_finds_every_spelling_of_a_resource(word):
    assert NAMES_A_RESOURCE.search(word), word


@pytest.mark.parametrize(
    "word", ["cluster_svc", "cluster-svc", "CLUSTER_SVC_URL", "CLUSTER_DATABASE_URL", "cluster_db_url", "Registry",
             "resource_id", "rules"],
)
def test_the_pattern_leaves_the_services_own_names_alone(word):
    assert not NAMES_A_RESOURCE.search(word), word


def code_strings(path: Path) -> list[str]:
    """The strings the code of ``path`` uses (not its docstrings or comments, nor its identifiers)."""
    return [word for word, is_string in _code_words(path) if is_string]


def code_words(path: Path) -> list[str]:
    """Every identifier, attribute, keyword and string the code of ``path`` uses: not its docstrings or comments."""
    return [word for word, _ in _code_words(path)]


def _code_words(path: Path) -> list[tuple[str, bool]]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.append((node.id, False))
        elif isinstance(node, ast.Attribute):
            words.append((node.attr, False))
        elif isinstance(node, ast.keyword) and node.arg:
            words.append((node.arg, False))
        elif isinstance(node, ast.alias):
            words.append((node.asname or node.name, False))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append((node.value, True))
    return words


@pytest.mark.parametrize("package", PACKAGES)
def test_outside_the_declarations_and_models_nothing_names_a_resource(package):
    offenders = [
        f"{path.relative_to(ROOT)}: {word!r}"
        for path in sorted((ROOT / package).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in DECLARATIONS and "migrations" not in path.parts
        for word in code_words(path)
        if word not in THEIRS and NAMES_A_RESOURCE.search(word)
    ]
    assert offenders == []


# platform_svc by role (docs/design.md, "Where things are"): each role a subpackage, and which
# may import which. The core modules (the tables, the public bodies, the sync states) import no
# role; the package itself (create_app) and the command line assemble them all.
ROLES = {
    "api": {"push"},  # a public write is pushed inline once committed
    "push": set(),
    "operations": {"push"},  # repair and the operator's retry judge copies as the push does
    "reconciler": {"push", "operations"},  # the periodic passes are operations
    "console": {"api", "push", "operations", "reconciler"},  # an operator's window on all of it
}
CORE = {"platform_svc.models", "platform_svc.schemas", "platform_svc.states", "platform_svc.settings"}
ASSEMBLERS = {"platform_svc", "platform_svc.cli", "platform_svc.credentials_cli"}


def role_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "platform_svc" and parts[1] in ROLES else None


def test_platform_svc_is_split_by_role_and_every_module_has_one():
    known = modules()
    loose = sorted(
        name for name in known
        if name.startswith("platform_svc") and role_of(name) is None and name not in CORE | ASSEMBLERS
        and name != "idempotent_pair_client.platform"  # the callers' client: imports nothing of the service
    )
    assert loose == []
    assert {role for role in map(role_of, known) if role} == set(ROLES)


def test_each_role_imports_only_the_roles_it_may(graph):
    offenders = []
    for name, imported in graph.items():
        role = role_of(name)
        if not name.startswith("platform_svc") or name in ASSEMBLERS:
            continue
        for other in imported:
            if not other.startswith("platform_svc"):
                continue
            other_role = role_of(other)
            allowed = other in CORE or other_role == role or (role is not None and other_role in ROLES[role])
            if not allowed:
                offenders.append(f"{name} -> {other}")
    assert offenders == []


def test_the_role_rules_catch_a_role_importing_one_it_may_not():
    assert role_of("platform_svc.push.pusher") == "push" and role_of("platform_svc.models") is None
    assert "api" not in ROLES["push"] and "console" not in ROLES["reconciler"]


def test_a_public_view_parses_and_answers_and_its_write_is_one_step_that_calls_down(graph):
    """The public routes leave a write's step (commit, push inline, record) to platform_svc.api.writes,
    which reaches the push path and the rules below it and nothing above it."""
    assert not {name for name in graph["platform_svc.api.views"] if role_of(name) == "push"}
    assert "platform_svc.api.writes" in graph["platform_svc.api.views"]
    assert "platform_svc.api.views" not in graph["platform_svc.api.writes"]
    assert {"platform_svc.push.inline", "platform_svc.api.services"} <= graph["platform_svc.api.writes"]


RUNTIME = ("shared", "cluster_svc", "platform_svc")
MAX_LINES = 400


def runtime_files() -> list[Path]:
    return [
        path for package in RUNTIME for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_no_runtime_module_holds_more_than_one_idea_by_its_size():
    long = [f"{path.relative_to(ROOT)}: {n}" for path in runtime_files()
            if (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert long == []


MAX_CLASS_LINES = 150


def test_no_class_of_the_runtime_or_the_client_holds_more_than_one_idea_by_its_size():
    client = sorted((ROOT / "client" / "idempotent_pair_client").rglob("*.py"))
    long = [
        f"{path.relative_to(ROOT)}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in [*runtime_files(), *client]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]
    assert long == []


def test_a_class_name_means_one_thing_within_a_package_and_between_shared_and_a_service():
    """Each service may name its models and views as the other does (they are separate programs);
    within one package, or between shared and a service, a name is one class. Classes nested in
    another (marshmallow's ``Meta``) are the outer one's business."""
    defined: dict[str, list[str]] = {}
    for path in runtime_files():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    clashes = {}
    for name, places in defined.items():
        packages = [place.split("/")[0] for place in places]
        if len(set(packages)) < len(packages) or ("shared" in packages and len(packages) > 1):
            clashes[name] = places
    assert clashes == {}


SYNC_STATES = {"pending", "synced", "failed", "stalled"}


def test_the_sync_states_are_spelled_only_by_their_enum():
    """Every surface (API, CLI, console, metrics) names a state through platform_svc.states, so
    they count the same rows the same way; templates and migrations are text, not code."""
    offenders = [
        f"{path.relative_to(ROOT)}: {word!r}"
        for path in sorted((ROOT / "platform_svc").rglob("*.py"))
        if "migrations" not in path.parts and path != ROOT / "platform_svc" / "states.py"
        for word in code_strings(path)
        if word in SYNC_STATES
    ]
    assert offenders == []


DOTTED = re.compile(r"\b(?:shared|cluster_svc|platform_svc|tooling)(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or something a module defines."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_dotted_name_a_comment_or_docstring_of_the_runtime_writes_exists():
    missing = sorted({
        f"{path.relative_to(ROOT)}: {name}"
        for path in runtime_files()
        for name in DOTTED.findall(path.read_text())
        if not resolves(name.rstrip("."))
    })
    assert missing == []


def test_the_name_checker_finds_a_name_that_is_gone():
    assert resolves("platform_svc.push.pusher.UnitPusher") and resolves("shared.errors")
    assert not resolves("platform_svc.sync") and not resolves("cluster_svc.resources")


MAX_REAL_SLEEPS = 10


def test_tests_wait_for_conditions_and_sleep_only_where_real_time_is_the_point():
    """A test waits for what it expects (tooling.testing.wait_for, an event, a controllable clock),
    never for a time it hopes is long enough; the few that must let real time pass (a fault's
    length, the bound a process of its own keeps on its own clock) say so beside the call."""
    sleeps = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__):  # it names the call it looks for
            continue
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if "time.sleep(" in line and not line.lstrip().startswith("#"):
                said = " ".join(lines[max(0, number - 3):number + 1]).lower()
                sleeps.append((f"{path.relative_to(ROOT)}:{number + 1}", "real time" in said))
    assert [where for where, why in sleeps if not why] == []
    assert len(sleeps) <= MAX_REAL_SLEEPS, sleeps
