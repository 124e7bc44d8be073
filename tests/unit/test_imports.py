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


def job_package_modules(*packages: str) -> list[str]:
    """The modules of the job's ``packages``, by name (``ledger.commits``), their own
    ``__init__`` left out."""
    return [
        f"{package}.{path.stem}"
        for package in packages
        for path in sorted((PACKAGES["floe_sparkapp"] / package).glob("*.py"))
        if path.stem != "__init__"
    ]


# The modules of the job's commit, decode and repair packages, by name: the operator loads none.
JOB_PACKAGE_MODULES = job_package_modules("commit", "decode", "repair")

# The job's packages the operator imports, the ledger and the layout, and each of their
# modules by name (one the package did not import is checked too).
OPERATOR_READS = [
    f"floe_sparkapp.{module}"
    for module in ("ledger", "layout", *job_package_modules("ledger", "layout"))
]


@pytest.mark.parametrize("module", OPERATOR_READS)
def test_the_job_modules_the_operator_reads_import_without_spark_or_kubernetes(module):
    done = import_without(module, "pyspark", "kopf", "kubernetes")
    assert done.returncode == 0, done.stderr


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
            "repair",
            *JOB_PACKAGE_MODULES,
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


def described(found: set[tuple[str, ...]]) -> list[str]:
    """Each circle once, from its first module by name back to it: ``a → b → c → a``."""
    once = set()
    for circle in found:
        first = circle.index(min(circle))
        once.add((*circle[first:], *circle[:first]))
    return [" → ".join((*circle, circle[0])) for circle in sorted(once)]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_module_imports_itself_back(package):
    within = {
        name: {i for i in imported if i.startswith(f"{package}.")}
        for name, imported in tree_imports().items()
        if name.startswith(f"{package}.")
    }
    assert len(within) > 10 and any(within.values())  # (the package's modules, read)
    found = circles(within)
    assert not found, "import circles:\n" + "\n".join(described(found))


# Where the tree's modules live and the names they are imported by: the packages, the stack,
# the tests, the images' scripts (which nothing imports), and the benchmarks' directory, whose
# scripts import each other by their plain names (each puts bench/ on sys.path).
TREE = {
    "floe_operator": ROOT / "operator" / "floe_operator",
    "floe_sparkapp": ROOT / "sparkapp" / "floe_sparkapp",
    "hack": ROOT / "hack",
    "tests": ROOT / "tests",
    "images": ROOT / "images",
    "": ROOT / "bench",
}

# Directories of the checkout that hold no module of the tree (build output, virtualenvs, and
# hidden ones: .venv, .git, the tools' caches).
NOT_THE_TREE = {"__pycache__", "build", "dist"}


def python_files(root: Path = ROOT) -> set[Path]:
    """Every Python file of the checkout, but those under :data:`NOT_THE_TREE`."""
    found = set()
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [
            d
            for d in subdirectories
            if not d.startswith(".")
            and d not in NOT_THE_TREE
            and not (Path(directory) / d / "pyvenv.cfg").exists()
        ]
        found.update(Path(directory) / f for f in files if f.endswith(".py"))
    return found


def tree_modules(tree: dict[str, Path] = TREE) -> dict[str, Path]:
    """Every module of the tree by its dotted name (a package by its own name)."""
    found = {}
    for prefix, root in tree.items():
        for path in python_files(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts] if prefix else parts) or prefix] = path
    return found


def tree_imports(tree: dict[str, Path] = TREE) -> dict[str, set[str]]:
    """Each module of the tree and the tree's modules it imports (a name imported from a
    package is the submodule when there is one, else the package).

    Every import statement counts, wherever it is: at the top, inside a function (a lazy
    import run later still needs the other module; put there to dodge a circle, it hides the
    circle rather than undoing it), under ``if TYPE_CHECKING:``. Importing ``a.b.c`` runs
    ``a`` and ``a.b`` first, so the module imports those packages too (a package's
    ``__init__`` often imports all of its modules), but for the packages the importing module
    is itself inside: they are already running when it is imported."""
    modules = tree_modules(tree)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def packages(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

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
        found.discard(None)
        for imported in list(found):
            found.update(p for p in packages(imported) - packages(name) if p in modules)
        graph[name] = found - {name}
    return graph


def test_no_import_circle_anywhere_in_the_tree():
    """The product, the stack, the benchmarks, the tests and the images' scripts: a lower
    module takes what two modules both need, never one of them from the other (lazy imports
    inside functions count: they hide a circle, they do not undo it)."""
    found = circles(tree_imports())
    assert not found, "import circles:\n" + "\n".join(described(found))


def test_the_tree_is_seen_whole():  # the test above would pass on a graph that missed modules
    assert set(tree_modules().values()) == python_files()  # every Python file of the checkout
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
        "tests.integration.jobkit",
        "images.spark.floe_job",
    } <= set(graph)
    assert "hack.stack.kube" in graph["hack.stack.node"]  # relative, from a package
    assert "floe_sparkapp.contract.base" in graph["floe_sparkapp.contract.table"]  # a subpackage
    assert "floe_sparkapp.ledger" in graph["floe_sparkapp.contract.table"]  # out of it, relative
    assert "floe_operator.render.topic" in graph["floe_operator.render.config"]
    assert "floe_operator.view" in graph["floe_operator.operation.batch"]
    assert "floe_operator.render" in graph["floe_operator.plan.job"]  # the package, re-exporting
    assert "benchkit" in graph["ab"]  # the benchmarks' plain names
    assert "floe_sparkapp.ledger" in graph["floe_operator.observe"]
    assert "floe_sparkapp.ledger.refs" in graph["floe_sparkapp.ledger.commits"]
    # imports inside functions
    assert "operator_scale" in graph["run"]  # in main()
    assert "run" in graph["commit_scale"]  # its record_latest
    assert "hack.stack.components" in graph["hack.stack.cluster"]  # in ready()
    assert "tests.jobstarts" in graph["tests.conftest"]  # in pytest's hooks
    assert "tests.integration.jobkit" in graph["operator_scale"]
    # a package its module runs first, and none of the importer's own
    assert {"hack.stack", "hack.stack.procs"} <= graph["operator_scale"]
    assert "hack.stack" not in graph["hack.stack.node"]
    assert "floe_sparkapp.__main__" in graph["images.spark.floe_job"]


def test_the_circle_check_finds_a_circle():
    found = circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert found == {("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b")}
    assert described(found) == ["a → b → c → a"]


def test_the_graph_sees_lazy_relative_and_plain_imports_and_the_packages_they_run(tmp_path):
    """A tree of two packages and two scripts, each circle through a kind of import the
    check must see: inside a function, relative, a package's ``__init__`` run by importing its
    module, the scripts' plain names."""
    files = {
        "p/__init__.py": "from . import a\n",
        "p/a.py": "def f():\n    from .b import x\n",
        "p/b.py": "import os\nfrom q.c import y\n",
        "q/__init__.py": "from p.a import f\n",
        "q/c.py": "y = 1\n",
        "scripts/s.py": "import t\n",
        "scripts/t.py": "def g():\n    from s import z\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = tree_imports({"p": tmp_path / "p", "q": tmp_path / "q", "": tmp_path / "scripts"})
    assert graph == {
        "p": {"p.a"},
        "p.a": {"p.b"},
        "p.b": {"q", "q.c"},
        "q": {"p", "p.a"},
        "q.c": set(),
        "s": {"t"},
        "t": {"s"},
    }
    assert described(circles(graph)) == [
        "p → p.a → p.b → q → p",
        "p.a → p.b → q → p.a",
        "s → t → s",
    ]
