"""Prometheus metrics of the worker-gateway (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from kube import metrics as _build_info  # noqa: F401  (gpustack_build_info on /metrics)

CLUSTERS = Gauge(
    "gpustack_gateway_clusters",
    "Subscribed clusters, by state: pending (its operator API not confirmed yet) or registered.",
    ["state"],
)
READINESS_CHECKS = Counter(
    "gpustack_gateway_readiness_checks_total",
    "Readiness checks of subscribed clusters' operator API, by outcome (ready, not_ready, timeout).",
    ["outcome"],
)
EVENTS = Counter(
    "gpustack_gateway_events_total",
    "Changes received from the clusters' watches and handed to the watch streams, by kind.",
    ["kind"],
)
WATCHERS = Gauge(
    "gpustack_gateway_watchers",
    "Open watch streams, by collection and whether they are aggregated.",
    ["collection", "aggregated"],
)
WATCHES_CLOSED = Counter(
    "gpustack_gateway_watches_closed_total",
    "Watch streams ended, by reason (client: the client left; slow: it fell too far behind; "
    "shutdown: the gateway stopped).",
    ["reason"],
)
REQUESTS = Counter(
    "gpustack_gateway_requests_total",
    "HTTP requests answered under /apis, by route and status code.",
    ["route", "code"],
)
