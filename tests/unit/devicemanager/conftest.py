"""Simulated inventories and Pods for the device-manager unit tests."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager.allocator import Allocator
from nodeplugins.devicemanager.backends.simulated import inventory_of
from nodeplugins.devicemanager.simulation import fakenvml
from nodeplugins.devicemanager.simulation import profile as profiles

NODE = "gpu-sim-0"
_counter = itertools.count()


@pytest.fixture(autouse=True)
def _real_library_afterwards():
    """pynvml back on the real library after each test that installed a simulated one."""
    yield
    fakenvml.install(None)


def make_allocator(cards: list[dict[str, Any]], manufacturer: str = "nvidia", **kw: Any) -> Allocator:
    profile = profiles.parse({"manufacturer": manufacturer, "cards": cards}, node=NODE)
    inventory = inventory_of(profile)
    allocator = Allocator(NODE, manufacturer, env=kw.pop("env", {}), **kw)
    allocator.set_inventory(inventory, devices.spec_groups(inventory, {}))
    return allocator


def pod(
    name: str, limits: dict[str, Any], *, phase: str = "Pending", containers: int = 1, **extra: Any
) -> dict:
    n = next(_counter)
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
            **extra,
        },
        "spec": {
            "nodeName": NODE,
            "containers": [
                {"name": "main" if i == 0 else f"c{i}", "resources": {"limits": dict(limits)}}
                for i in range(containers)
            ],
        },
        "status": {"phase": phase},
    }


@pytest.fixture
def h100() -> Allocator:
    return make_allocator(
        [
            {"product": "NVIDIA H100 80GB HBM3", "count": 4},
            {"product": "NVIDIA H100 80GB HBM3", "count": 2, "partitioned": True},
        ]
    )
