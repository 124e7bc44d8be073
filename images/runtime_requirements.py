"""Prints the runtime requirements of a pyproject.toml, minus the names given.

The images install floe's requirements in a layer of their own, before the floe wheel (with
``--no-deps``): the requirements change with pyproject.toml only, so a code change rebuilds and
ships a small layer. The operator's image leaves pyspark out (a 400 MB download it never uses).

    python runtime_requirements.py pyproject.toml pyspark > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements(pyproject: Path, without: set[str]) -> list[str]:
    skip = {_normal(name) for name in without}
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [requirement for requirement in dependencies
            if _normal(_NAME.match(requirement).group(1)) not in skip]


if __name__ == "__main__":
    print("\n".join(runtime_requirements(Path(sys.argv[1]), set(sys.argv[2:]))))
