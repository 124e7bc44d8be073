"""What each part of floe imports: the planner alone, the operator without Spark, and no
module of a package importing itself back through another."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "floe_operator": ROOT / "operator" / "floe_operator",
    "floe_sparkapp": ROOT / "sparkapp" / "floe_sparkapp",
}

BLOCKER = """
import importlib, importlib.abc, sys
BLOCKED = {blocked!r}

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{{name}} is blocked")
        return None

sys.meta_path.insert(0, Blocked())
importlib.import_module({module!r})
"""


def import_without(module: str, *blocked: str) -> subprocess.CompletedProcess:
    """Imports ``module`` in a fresh interpreter where importing any of ``blocked`` fails."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKER.format(blocked=blocked, module=module)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


# The planners (a topic's, an operation's) and what they render: each package, and each of its
# modules by name (one its package did not import is checked too).
PLANNER = [
    module
    for package in ("plan", "operation", "render")
    for module in (
        f"floe_operator.{package}",
        *(
            f"floe_operator.{package}.{path.stem}"
            for path in sorted((PACKAGES["floe_operator"] / package).glob("*.py"))
            if path.stem != "__init__"
        ),
    )
]


@pytest.mark.parametrize("module", PLANNER)
def test_the_planner_imports_without_kubernetes_a_catalog_kafka_or_spark(module):
    done = import_without(
        module,
        "kubernetes",
        "kopf",
        "pyiceberg.catalog",
        "confluent_kafka",
        "pyspark",
    )
    assert done.returncode == 0, done.stderr


# The kubectl plugin, and each module of its package by name.
PLUGIN = [
    "floe_operator.cli",
    *(
        f"floe_operator.cli.{path.stem}"
        for path in sorted((PACKAGES["floe_operator"] / "cli").glob("*.py"))
        if path.stem != "__init__"
    ),
    "floe_operator.client",
    "floe_operator.report",
]


@pytest.mark.parametrize("module", PLUGIN)
def test_the_kubectl_plugin_imports_with_the_api_client_alone(module):
    """``pip install floe`` installs kubernetes and pyyaml only (the plugin's dependencies)."""
    done = import_without(
        module,
        "kopf",
        "pydantic_settings",
        "pyiceberg",
        "confluent_kafka",
        "pyspark",
        "prometheus_client",
        "fastavro",
        "pyarrow",
        "boto3",
        "grpc_tools",
    )
    assert done.returncode == 0, done.stderr


def test_the_blocker_blocks():  # the tests above and below would pass on a blocker that did not
    done = import_without("floe_operator.observe", "kubernetes")
    assert done.returncode != 0 and "kubernetes is blocked" in done.stderr


def test_the_operator_imports_without_spark():
    done = import_without("floe_operator.handlers", "pyspark")
    assert done.returncode == 0, done.stderr


# The modules of the job's commit and decode packages, by name.
COMMIT_AND_DECODE_MODULES = [
    f"{package}.{path.stem}"
    for package in ("commit", "decode")
    for path in sorted((PACKAGES["floe_sparkapp"] / package).glob("*.py"))
    if path.stem != "__init__"
]


def test_the_operator_reads_the_jobs_ledger_never_its_committer_or_writer():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, floe_operator.handlers; print(' '.join(sorted("
            "m for m in sys.modules if m.startswith('floe_sparkapp.'))))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    loaded = {name.removeprefix("floe_sparkapp.") for name in done.stdout.split()}
    assert "ledger" in loaded
    assert loaded.isdisjoint(
        {
            "commit",
            *COMMIT_AND_DECODE_MODULES,
            "table_writer",
            "batch_decoder",
            "batch_write",
            "batch_start",
            "batch_writer",
            "job",
            "query",
            "prepare",
            "start_position",
            "session",
            "kafka_offsets",
            "decode",
            "protobuf_decode",
            "dead_letters",
            "upsert",
            "checkpoint",
        }
    ), loaded


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    found = set()

    def walk(module: str, path: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            if imported in path:
                found.add(tuple(path[path.index(imported) :]))
            elif imported not in seen:
                seen.add(imported)
                walk(imported, [*path, imported])

    for start in graph:
        seen = {start}
        walk(start, [start])
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_module_imports_itself_back(package):
    within = {
        name: {i for i in imported if i.startswith(f"{package}.")}
        for name, imported in tree_imports().items()
        if name.startswith(f"{package}.")
    }
    assert len(within) > 10 and any(within.values())  # (the package's modules, read)
    assert circles(within) == set()


# Where the tree's modules live and the names they are imported by: the packages, and the
# benchmarks' directory, whose scripts import each other by their plain names.
TREE = {
    "floe_operator": ROOT / "operator" / "floe_operator",
    "floe_sparkapp": ROOT / "sparkapp" / "floe_sparkapp",
    "hack": ROOT / "hack",
    "tests": ROOT / "tests",
    "": ROOT / "bench",
}


def tree_modules() -> dict[str, Path]:
    """Every module of the tree by its dotted name (a package by its own name)."""
    found = {}
    for prefix, root in TREE.items():
        for path in root.rglob("*.py"):
            if any(part.startswith(".") or part == "__pycache__" for part in path.parts):
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts] if prefix else parts) or prefix] = path
    return found


def tree_imports() -> dict[str, set[str]]:
    """Each module of the tree and the tree's modules it imports, anywhere in it (a name
    imported from a package is the submodule when there is one, else the package)."""
    modules = tree_modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = ".".join(filter(None, [base, node.module]))
                else:
                    base = node.module or ""
                found.update(
                    known(f"{base}.{alias.name}")
                    if f"{base}.{alias.name}" in modules
                    else known(base)
                    for alias in node.names
                )
        graph[name] = found - {None, name}
    return graph


def test_no_import_circle_anywhere_in_the_tree():
    """The product, the stack, the benchmarks and the tests: a lower module takes what two
    modules both need, never one of them from the other (lazy imports inside functions
    count: they hide a circle, they do not undo it)."""
    assert circles(tree_imports()) == set()


def test_the_tree_is_seen_whole():  # the test above would pass on a graph that missed modules
    graph = tree_imports()
    assert {
        "floe_operator.plan",
        "floe_operator.plan.job",  # a subpackage's module
        "floe_operator.operation.batch",
        "floe_operator.render.application",
        "floe_sparkapp.job",
        "floe_sparkapp.contract",
        "floe_sparkapp.contract.topic",
        "hack.stack.components",
        "run",
        "tests.e2e.conftest",
    } <= set(graph)
    assert "hack.stack.kube" in graph["hack.stack.node"]  # relative, from a package
    assert "floe_sparkapp.contract.base" in graph["floe_sparkapp.contract.table"]  # a subpackage
    assert "floe_sparkapp.ledger" in graph["floe_sparkapp.contract.table"]  # out of it, relative
    assert "floe_operator.render.topic" in graph["floe_operator.render.config"]
    assert "floe_operator.view" in graph["floe_operator.operation.batch"]
    assert "floe_operator.render" in graph["floe_operator.plan.job"]  # the package, re-exporting
    assert "benchkit" in graph["ab"]  # the benchmarks' plain names
    assert "floe_sparkapp.ledger" in graph["floe_operator.observe"]


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {
        ("a", "b", "c"),
        ("b", "c", "a"),
        ("c", "a", "b"),
    }
