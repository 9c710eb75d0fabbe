"""Reading the request log and setting faults of a local hub running as its own process."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict
from typing import Any

from tests.hub.server import Fault


class HubControl:
    """The ``/_hub/`` routes of the hub at ``endpoint`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.endpoint + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def log(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self._call("GET", "/_hub/log") if kind is None or e["kind"] == kind]

    def clear_log(self) -> None:
        self._call("DELETE", "/_hub/log")

    def set_faults(self, *faults: Fault) -> None:
        self._call("PUT", "/_hub/faults", [asdict(f) for f in faults])

    def healthy(self) -> bool:
        try:
            return bool(self._call("GET", "/_hub/health").get("ok"))
        except OSError:
            return False
