"""Prints an installed distribution's requirements, minus extras and the names given.

Both images install the floe wheel with ``--no-deps`` and then its requirements from this list,
so that pyspark (a 400 MB download) is left out: the operator never imports it and the Spark
image already ships Spark's own copy, which must be the one the JVM runs with.

    python runtime_requirements.py floe pyspark > requirements.txt
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"\bextra\s*==")


def runtime_requirements(dist: str, without: set[str]) -> list[str]:
    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    skip = {normal(name) for name in without}
    kept = []
    for requirement in importlib.metadata.requires(dist) or []:
        _, _, marker = requirement.partition(";")
        if _EXTRA.search(marker):
            continue  # only wanted with an extra such as [test]
        match = _NAME.match(requirement)
        if match and normal(match.group(1)) not in skip:
            kept.append(requirement)
    return kept


if __name__ == "__main__":
    print("\n".join(runtime_requirements(sys.argv[1], set(sys.argv[2:]))))
