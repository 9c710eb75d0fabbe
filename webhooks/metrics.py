"""Prometheus metrics of the webhook server.

Latency buckets match the apiserver's own admission histogram (5 ms … 25 s) with finer ones below
5 ms, where a healthy webhook lives.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.004,
    0.005,
    0.025,
    0.1,
    0.5,
    1.0,
    2.5,
    10.0,
    25.0,
)

REQUESTS = Counter(
    "gpustack_webhook_requests_total",
    "Admission requests answered, by webhook, outcome (allowed, denied, error, bad_request) and code.",
    ["webhook", "outcome", "code"],
)
LATENCY = Histogram(
    "gpustack_webhook_request_duration_seconds",
    "Time from the request body being read to the response being sent, by webhook.",
    ["webhook"],
    buckets=LATENCY_BUCKETS,
)


class WebhookMetrics:
    """Pre-resolved label children for one webhook, so the hot path does no label lookup."""

    __slots__ = ("_counters", "latency", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.latency = LATENCY.labels(name)
        self._counters: dict[tuple[str, int], object] = {}

    def count(self, outcome: str, code: int) -> None:
        counter = self._counters.get((outcome, code))
        if counter is None:
            counter = self._counters[(outcome, code)] = REQUESTS.labels(self.name, outcome, str(code))
        counter.inc()  # type: ignore[attr-defined]
