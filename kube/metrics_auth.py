"""Who may read ``/metrics``: the caller the apiserver authenticates and authorizes, as Kueue does.

Kueue (controller-runtime's ``WithAuthenticationAndAuthorization`` filter) serves its metrics over
HTTPS and lets a scrape through only when the bearer token passes a ``TokenReview`` and the user it
names passes a ``SubjectAccessReview`` for ``get`` on the non-resource URL ``/metrics``.  This is
that check, for the worker's endpoint (``worker --metrics-auth``): no token or a token the apiserver
does not authenticate is 401, a user without the permission 403, an allowed one 200.  A scraper's
ServiceAccount gets the permission from the ``gpustack-operator-metrics-reader`` ClusterRole.

Decisions are cached briefly by the token's SHA-256 (never the token itself): an allowed one for
``allowed_ttl`` seconds, a refused one for ``denied_ttl``, so a Prometheus scraping every 15 s costs
the apiserver two reviews a minute at most; an apiserver that cannot answer is a 503, never cached.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kube.client import ApiError, Client

METRICS_PATH = "/metrics"
MAX_CACHED = 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    """The HTTP status the scrape gets (200, 401, 403 or 503) and, when refused, why."""

    status: int
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED = Verdict(200)
NO_TOKEN = Verdict(401, "Unauthorized: send a bearer token (Authorization: Bearer <token>)")


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or ``""``."""
    if not header:
        return ""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class MetricsAuthorizer:
    """``TokenReview`` then ``SubjectAccessReview`` (``get`` on ``path``), decisions cached."""

    def __init__(
        self,
        client: Client,
        *,
        path: str = METRICS_PATH,
        allowed_ttl: float = 60.0,
        denied_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.path = path
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, Verdict]] = {}
        self._lock = threading.Lock()
        self.reviews = 0  # TokenReviews sent (tests read it to see the cache work)

    def cached(self, header: str | None) -> Verdict | None:
        """The verdict without a call to the apiserver, when one is known (no token: always)."""
        token = bearer(header)
        if not token:
            return NO_TOKEN
        key = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._cache[key]
                return None
            return entry[1]

    def check(self, header: str | None) -> Verdict:
        """The verdict for an ``Authorization`` header: from the cache, else from two reviews
        (blocking: call it off the event loop)."""
        known = self.cached(header)
        if known is not None:
            return known
        token = bearer(header)
        try:
            verdict = self._review(token)
        except ApiError as error:
            return Verdict(503, f"the apiserver could not review the token: {error.status} {error.reason}")
        now = self.clock()
        ttl = self.allowed_ttl if verdict.allowed else self.denied_ttl
        key = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) >= MAX_CACHED:
                    self._cache.clear()
            self._cache[key] = (now + ttl, verdict)
        return verdict

    def _review(self, token: str) -> Verdict:
        self.reviews += 1
        review = self.client.create(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        )
        status = (review or {}).get("status") or {}
        if not status.get("authenticated"):
            return Verdict(401, "Unauthorized: the apiserver did not authenticate the token")
        user: dict[str, Any] = status.get("user") or {}
        name = str(user.get("username") or "")
        spec: dict[str, Any] = {
            "user": name,
            "groups": list(user.get("groups") or []),
            "nonResourceAttributes": {"path": self.path, "verb": "get"},
        }
        if user.get("uid"):
            spec["uid"] = str(user["uid"])
        if user.get("extra"):
            spec["extra"] = {str(k): list(v or []) for k, v in dict(user["extra"]).items()}
        access = self.client.create(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        )
        if ((access or {}).get("status") or {}).get("allowed"):
            return ALLOWED
        return Verdict(403, f'Forbidden: user "{name}" may not get {self.path}')
