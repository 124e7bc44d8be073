"""Starting, probing and stopping the stack's processes.

Each process runs detached in its own session, writes its log to ``$FLOE_RUN/logs/NAME.log``
and its pid to ``$FLOE_RUN/pids/NAME.pid``, so the stack outlives the command that started it
and ``down`` can stop it from another shell.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import closing, suppress
from pathlib import Path

from . import paths


class ComponentError(RuntimeError):
    """A component failed to start; the message names it and shows the tail of its log."""


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def log_path(name: str) -> Path:
    return paths.LOGS / f"{name}.log"


def _pid_path(name: str) -> Path:
    return paths.RUN / "pids" / f"{name}.pid"


def log_tail(name: str, lines: int = 40) -> str:
    path = log_path(name)
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def pid_of(name: str) -> int | None:
    path = _pid_path(name)
    if not path.exists():
        return None
    pid = int(path.read_text().strip())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    # A zombie (exited, not yet reaped by the process that started it) is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except OSError:
        return None
    return pid


def spawn(
    name: str, cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> int:
    paths.LOGS.mkdir(parents=True, exist_ok=True)
    _pid_path(name).parent.mkdir(parents=True, exist_ok=True)
    with log_path(name).open("a") as out:
        out.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    _pid_path(name).write_text(str(proc.pid))
    return proc.pid


def wait_healthy(name: str, probe: Callable[[], bool], timeout: float) -> float:
    """Polls ``probe`` until it answers; returns the seconds it took, or raises ComponentError."""
    started = time.monotonic()
    while True:
        try:
            if probe():
                return time.monotonic() - started
        except Exception:  # noqa: BLE001 - a probe may fail in any way while the component starts
            pass
        if pid_of(name) is None:
            raise ComponentError(
                f"{name} exited while starting; last lines of {log_path(name)}:\n{log_tail(name)}"
            )
        if time.monotonic() - started > timeout:
            raise ComponentError(
                f"{name} not healthy after {timeout:.0f}s; last lines of "
                f"{log_path(name)}:\n{log_tail(name)}"
            )
        time.sleep(0.3)


def stop(name: str, *, kill: bool = False, timeout: float = 20) -> bool:
    """Stops a component (SIGTERM, then SIGKILL after ``timeout``); True if it was running."""
    pid = pid_of(name)
    if pid is None:
        _pid_path(name).unlink(missing_ok=True)
        return False
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_of(name) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_of(name) is not None:
        os.killpg(pid, signal.SIGKILL)
        while pid_of(name) is not None:
            time.sleep(0.1)
    _pid_path(name).unlink(missing_ok=True)
    return True


def stop_group(process: subprocess.Popen, timeout: float = 30) -> None:
    """Stops a child started in a session of its own and everything it started: SIGTERM to its
    process group, SIGKILL after ``timeout``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()
