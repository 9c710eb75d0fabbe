"""What every component's ``/metrics`` carries besides its own figures: ``gpustack_build_info``.

Imported by each component's entry point (worker, device manager, model manager, worker-gateway),
so a scrape says which build answered; the value is always 1 and the labels carry the facts, the
way Kubernetes' own ``*_build_info`` gauges do.
"""

from __future__ import annotations

import platform

from prometheus_client import Gauge

from api import OPERATOR_VERSION

BUILD_INFO = Gauge(
    "gpustack_build_info",
    "Always 1: the operator version and the Python version of the component that answered.",
    ["version", "python"],
)
BUILD_INFO.labels(OPERATOR_VERSION, platform.python_version()).set(1)
