"""The gateway's one door to the project's Kubernetes layer.

Everything the gateway needs from it (the REST client, its error, informers) is imported here and
nowhere else in ``gateway/``, so moving that layer is a one-line change in this file.  On top of
the shared client this adds what a gateway talking to many clusters needs: a client-side rate limit
per cluster (``--kube-conn-qps``/``--kube-conn-burst``) and a read of a discovery document.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from kube.client import ApiError, Client
from kube.informer import Informer

__all__ = ["ApiError", "ClusterClient", "Informer", "RateLimit"]


class RateLimit:
    """A token bucket: ``qps`` requests a second on average, bursts of up to ``burst``."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def delay(self) -> float:
        """Take a token; the seconds to wait before the request may go (0 when one was free)."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def take(self) -> None:
        wait = self.delay()
        if wait > 0:
            time.sleep(wait)


class ClusterClient(Client):
    """The shared REST client for one subscribed cluster, rate-limited."""

    def __init__(self, api_client: Any, *, timeout: float, limit: RateLimit | None = None) -> None:
        super().__init__(api_client, timeout=timeout)
        self.limit = limit

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.limit is not None:
            self.limit.take()
        return super()._call(method, path, **kwargs)

    def discover(self, path: str, *, timeout: float) -> dict[str, Any]:
        """GET a discovery document (``/apis/<group>/<version>``); raises :class:`ApiError`."""
        body = self._call("GET", path, timeout=timeout)
        return body if isinstance(body, dict) else {}

    def close(self) -> None:
        # A pool half-used by an informer thread's watch may complain; closing is best effort.
        with contextlib.suppress(Exception):
            self.api.close()
