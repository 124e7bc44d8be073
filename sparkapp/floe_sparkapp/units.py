"""Durations and sizes as the resource writes them, and as ``floe status`` prints them.

A leaf module: the contract's patterns and rules (the CRD's, the operator's and the job's) and the
renderer all read the same syntax from here.
"""

from __future__ import annotations

import re

# Each unit at most once, largest first (1d12h, 90s, 1m30s, 500ms): what a CEL rule can add up.
DURATION = (
    r"^([0-9]+(\.[0-9]+)?d)?([0-9]+(\.[0-9]+)?h)?([0-9]+(\.[0-9]+)?m)?"
    r"([0-9]+(\.[0-9]+)?s)?([0-9]+(\.[0-9]+)?ms)?$"
)
DURATION_MAX_LENGTH = 32
QUANTITY = r"^[0-9]+(\.[0-9]+)?(k|m|g|t|K|M|G|T|Ki|Mi|Gi|Ti)?$"

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400}
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([kmgtKMGT]i?)?$")
_SIZE_UNIT = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}


def cel_seconds(value: str = "self") -> str:
    """A CEL expression of the seconds a duration string holds (a double). CEL's duration()
    takes Go's units, so a leading day part is counted apart; no string is built, which keeps
    the API server's estimate of the rule's cost small."""
    parts = f"{value}.split('d')"
    return (
        f"(size({parts}) == 1 ? double(duration({value}).getSeconds()) : "
        f"double({parts}[0]) * 86400.0 + "
        f"({parts}[1] == '' ? 0.0 : double(duration({parts}[1]).getSeconds())))"
    )


def cel_bytes(value: str = "self") -> str:
    """A CEL expression of the bytes a size string holds (a double), as :func:`size_bytes`
    counts them: lower case and ``i`` units are binary (Spark's ``512m`` is 512 MiB)."""
    units = [
        ("Ti", 1024**4),
        ("t", 1024**4),
        ("T", 1000**4),
        ("Gi", 1024**3),
        ("g", 1024**3),
        ("G", 1000**3),
        ("Mi", 1024**2),
        ("m", 1024**2),
        ("M", 1000**2),
        ("Ki", 1024),
        ("k", 1024),
        ("K", 1000),
    ]
    factor = "1.0"
    for unit, bytes_ in reversed(units):
        factor = f"({value}.endsWith('{unit}') ? {float(bytes_)} : {factor})"
    return f"double({value}.find('^[0-9]+(\\\\.[0-9]+)?')) * {factor}"


def seconds(text: str) -> float:
    """'90s', '1m30s', '2h', '7d', '500ms' as seconds, as :func:`cel_seconds` counts them."""
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


def duration_seconds(text: str) -> int:
    """'90s', '1m30s', '2h', '7d' as whole seconds."""
    return round(seconds(text))


def size_bytes(text: str) -> int:
    """'256Mi', '1G', '512m' (Spark's way: lower case is binary) as bytes."""
    found = _SIZE.match(text)
    if found is None:
        raise ValueError(f"not a size: {text!r}")
    number, unit = found.groups()
    unit = unit or ""
    if unit.endswith("i") or unit.islower():
        scale: int = 1024 ** ("KMGT".index(unit[0].upper()) + 1)
        return round(float(number) * scale)
    return round(float(number) * _SIZE_UNIT[unit])


def short_duration(seconds: float | int) -> str:
    """kubectl's short form: 42s, 5m3s, 2h1m, 3d4h."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m{rest}s" if rest and minutes < 10 else f"{minutes}m"
    if seconds < 86400:
        hours, rest = divmod(seconds, 3600)
        return f"{hours}h{rest // 60}m" if rest // 60 and hours < 10 else f"{hours}h"
    days, rest = divmod(seconds, 86400)
    return f"{days}d{rest // 3600}h" if rest // 3600 and days < 10 else f"{days}d"
