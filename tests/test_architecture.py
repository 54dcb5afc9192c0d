"""The structure the code promises (docs/design.md, "Where things are"):
shared knows neither service, the services never import each other, no two
modules import each other (directly or around a longer loop), and outside the
resources' declarations and models nothing names a resource, in any spelling:
the machinery (and the tooling) reads everything from the registry.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tooling.testing import ROOT

PACKAGES = ("shared", "cluster_svc", "platform_svc", "tooling")
# Where resources are declared, and the models that hold them; everything else goes through the registry.
DECLARATIONS = {"shared/contract.py", "cluster_svc/models.py", "platform_svc/models.py"}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports anywhere (deferred imports in functions too),
    except under ``if TYPE_CHECKING:``, which never runs."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for test in ast.walk(tree)
        if isinstance(test, ast.If) and "TYPE_CHECKING" in ast.unparse(test.test)
        for node in ast.walk(test)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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


def code_words(path: Path) -> list[str]:
    """Every identifier, attribute, keyword and string the code of ``path`` uses: not its docstrings or comments."""
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
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            words.append(node.arg)
        elif isinstance(node, ast.alias):
            words.append(node.asname or node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
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
