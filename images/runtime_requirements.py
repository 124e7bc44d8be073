"""Prints the runtime requirements of a pyproject.toml: its dependencies and those of the extras
named.

The images install floe's requirements in a layer of their own, before the floe wheel (with
``--no-deps``): the requirements change with pyproject.toml only, so a code change rebuilds and
ships a small layer. The operator's image takes the extra ``operator``; the Spark image also
``job`` (pyspark, a 400 MB download the operator never uses).

    python runtime_requirements.py pyproject.toml operator job > requirements.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib


def runtime_requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"no such extra in {pyproject}: {', '.join(unknown)}")
    # The extras' first: pip's resolver settles the packages it meets first, and boto3's
    # pins on urllib3 met after the Kubernetes client's send it back through hundreds of boto3
    # releases.
    return [*(r for extra in extras for r in optional[extra]), *project["dependencies"]]


if __name__ == "__main__":
    print("\n".join(runtime_requirements(Path(sys.argv[1]), sys.argv[2:])))
