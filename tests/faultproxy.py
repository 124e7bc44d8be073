"""Faults between the job and its neighbours, made by the stack's Toxiproxy (its HTTP API).

The stack starts one proxy per neighbour (``kafka``, ``registry``, ``s3``, ``postgres``,
``rest_catalog``); a job configured with the ``FLOE_FAULTY_*`` endpoints reaches each neighbour
only through its proxy.  A fault is a toxic on a proxy (latency, resets, replies that never
arrive) or the proxy disabled (connections refused); :meth:`FaultProxy.reset` takes them all
away.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

PROXIES = ("kafka", "registry", "s3", "postgres", "rest_catalog")


class FaultProxy:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def proxies(self) -> dict[str, Any]:
        return self._call("GET", "/proxies")

    def add_toxic(
        self,
        proxy: str,
        kind: str,
        *,
        stream: str = "downstream",
        name: str | None = None,
        toxicity: float = 1.0,
        **attributes: Any,
    ) -> str:
        """Adds a toxic (``latency``, ``reset_peer``, ``timeout``, ``limit_data``, ...) to the
        proxy's ``downstream`` (neighbour to client) or ``upstream`` stream; returns its name."""
        name = name or f"{kind}_{stream}"
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {
                "name": name,
                "type": kind,
                "stream": stream,
                "toxicity": toxicity,
                "attributes": attributes,
            },
        )
        return name

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def enable(self, proxy: str, enabled: bool = True) -> None:
        """A disabled proxy closes its connections and refuses new ones."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed."""
        self._call("POST", "/reset")
