"""Where the suite waits: every ``wait_until`` of a test, by the line that waited.

The e2e tests spend most of their time waiting for something to show in the API server or
the table (a first commit, a status refresh, a failover). Each wait is recorded with its test,
the test file's line that waited, how long it took and whether it came true; the suite writes
them to ``reports/waits.json`` and prints the lines that waited longest in all. A wait of a
background thread (a job namespace made anew beside the next test) is kept in the file but
not counted in the summary: no test waited for it.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class Waits:
    def __init__(self) -> None:
        self.test = ""
        self.waits: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def record(self, depth: int, seconds: float, came_true: bool) -> None:
        """Records a wait that took ``seconds``, made from the frame ``depth`` above the
        caller (the test's line, not the helper's)."""
        frame = sys._getframe(depth + 1)
        where = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
        background = threading.current_thread() is not threading.main_thread()
        with self.lock:
            self.waits.append(
                {
                    "test": self.test,
                    "where": where,
                    "seconds": round(seconds, 2),
                    "came_true": came_true,
                    "background": background,
                }
            )

    def dump(self, path: Path) -> None:
        """Writes this process's waits to ``path`` (one worker's part of the run)."""
        path.write_text(json.dumps(self.waits) + "\n")

    @staticmethod
    def summarize(parts: Iterable[Path], path: Path, top: int = 10) -> list[str]:
        """Writes every worker's waits to ``path``; the summary's lines."""
        every: list[dict[str, Any]] = []
        for part in sorted(parts):
            every.extend(json.loads(part.read_text()))
        if not every:
            return []
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(every, indent=1) + "\n")
        waited = [w for w in every if not w["background"]]
        by_line: dict[str, list[float]] = defaultdict(list)
        for wait in waited:
            by_line[wait["where"]].append(wait["seconds"])
        total = sum(w["seconds"] for w in waited)
        lines = [
            f"waits of the tests: {len(waited)}, {total / 60:.1f} min in all (every wait: "
            f"{path}); the lines that waited longest:"
        ]
        for where, each in sorted(by_line.items(), key=lambda kv: -sum(kv[1]))[:top]:
            lines.append(f"  {sum(each):7.1f} s  {len(each):3d} × {where}")
        return lines


waits = Waits()
