"""The Kubernetes API as a stand-in inside a Pod reaches it: the service account's token (read at
each call: the kubelet rotates it) and CA, the apiserver from ``KUBERNETES_SERVICE_HOST``/``_PORT``.
The standard library only, so that an image without the project's dependencies can carry it."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class APIError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class KubeAPI:
    def __init__(self, base: str | None = None, account: Path = SERVICE_ACCOUNT) -> None:
        if base is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
            host = f"[{host}]" if ":" in host else host
            base = f"https://{host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        self.base, self.account = base, account
        ca = account / "ca.crt"
        self.tls = (
            ssl.create_default_context(cafile=str(ca)) if base.startswith("https") and ca.exists() else None
        )

    def namespace(self) -> str | None:
        path = self.account / "namespace"
        return path.read_text().strip() if path.exists() else None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; an answer other than 2xx raises APIError with its status."""
        token = (self.account / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.tls) as answer:
                return dict(json.loads(answer.read() or b"{}"))
        except urllib.error.HTTPError as error:
            raise APIError(error.code, error.read().decode(errors="replace")[:300]) from error

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())})
        return list(self.call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}")["items"])
