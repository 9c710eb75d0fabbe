"""Is the operator's API served in a cluster?  One check, and the back-off between checks.

The operator serves its kinds as CRDs at ``worker.gpustack.ai/v1`` (the reference serves them from
an aggregated API server and checks its APIServices); the discovery document of that group version
lists a resource only once its CRD is established, so one GET answers it: the API is ready when the
document lists ``instancetypes``.  The resources it lists are remembered, so the gateway watches
only kinds the cluster serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api import GROUP, VERSION
from gateway.kinds import REQUIRED
from gateway.kubeapi import ApiError, ClusterClient

DISCOVERY = f"/apis/{GROUP}/{VERSION}"
FIRST_DELAY = 5.0
MAX_DELAY = 60.0


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str = ""
    served: frozenset[str] = field(default_factory=frozenset)  # plurals of worker.gpustack.ai/v1


def judge(document: Any) -> Readiness:
    """Read a discovery document of ``worker.gpustack.ai/v1``."""
    resources = document.get("resources") if isinstance(document, dict) else None
    served = frozenset(
        r["name"]
        for r in resources or ()
        if isinstance(r, dict) and isinstance(r.get("name"), str) and "/" not in r["name"]
    )
    if REQUIRED.plural not in served:
        return Readiness(False, f"{GROUP}/{VERSION} does not serve {REQUIRED.plural} yet", served)
    return Readiness(True, "", served)


def explain(error: ApiError) -> str:
    """Why a discovery GET failed, in words that say what to look at."""
    if error.status == 404:
        return f"{GROUP}/{VERSION} is not served: is the operator installed in that cluster?"
    if error.status in (401, 403):
        return f"the cluster (or the proxy in front of it) refused the credentials: {error}"
    if error.status == 0:
        return f"unreachable: {error.message}"
    return f"discovery of {GROUP}/{VERSION} failed: {error}"


def check(client: ClusterClient, timeout: float) -> Readiness:
    """One readiness check, bounded by ``timeout`` seconds (blocking: run it off the event loop)."""
    try:
        return judge(client.discover(DISCOVERY, timeout=timeout))
    except ApiError as error:
        return Readiness(False, explain(error))


def delay(attempt: int, first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> float:
    """Seconds before check ``attempt + 1`` after ``attempt + 1`` failures: 5, 10, 20, 40, 60, 60…"""
    return float(min(first * 2 ** min(attempt, 32), cap))
