"""Instances, as the Instance webhook leaves them, for the Instance controller's unit tests."""

from __future__ import annotations

import copy
from typing import Any

UID = "5f1c7a2e-0000-4000-8000-00000000cafe"


def instance(**spec: Any) -> dict[str, Any]:
    """The seed's sliced Instance (sized: 20 % of an A10G, 8 CPU/64Gi unit), with ``spec`` over it."""
    base: dict[str, Any] = {
        "type": "gpustack--nvidia-a10g-linux-amd64",
        "image": "ubuntu:24.04",
        "imagePullPolicy": "IfNotPresent",
        "command": ["tail", "-f", "/dev/null"],
        "sshPublicKey": {"name": "workspace-key"},
        "volumeMount": "/workspace",
        "resources": {
            "accelerator": "1",
            "acceleratorSlicedMemoryPercentage": 20,
            "acceleratorSlicedCoresPercentage": 100,
            "cpu": "1600m",
            "ram": "13743895347",
            "localStorage": "15Gi",
        },
        "volume": {"ephemeral": {"capacity": "1Gi"}},
    }
    base.update(copy.deepcopy(spec))
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "sliced-demo", "namespace": "team-a", "uid": UID, "generation": 1},
        "spec": base,
    }
