"""C.9 (1) and (2) at gate 1: the RDMA keys are no accelerator family — the Pod webhook's family rules
neither apply to nor count them — and nothing about them is folded: what a Pod asks for is what
schedules.  (C.9 (3) and (4), the ModelDeployment ``interface`` rules, are in
``test_model_deployment.py`` and ``test_model_deployment_lookups.py``.)"""

from __future__ import annotations

import pytest

from api.manufacturers import RDMA_KEYS
from tests.webhooks.test_pod import container, mutate, mutated, pod, validate


def test_a_shared_card_and_a_shared_interface_in_one_container_are_accepted() -> None:
    obj = pod(container("main", {"nvidia.com/gpu.shared": "1", "device.gpustack.ai/rdma.shared": "1"}))
    assert validate(obj).allowed
    after = mutated(obj)
    limits = after["spec"]["containers"][0]["resources"]["limits"]
    assert limits["device.gpustack.ai/rdma.shared"] == "1"  # untouched by the fold
    assert not any(k.startswith("device.gpustack.ai/rdma") and k.endswith(".units") for k in limits)


@pytest.mark.parametrize("key", RDMA_KEYS)
@pytest.mark.parametrize("quantity", ["1", "8"])
def test_rdma_keys_alone_pass_untouched(key: str, quantity: str) -> None:
    obj = pod(container("main", {key: quantity}), queue=None)
    decision = mutate(obj)
    assert decision.allowed and decision.patch == []  # no .units key, no fold: the quantity schedules
    assert validate(obj).allowed


def test_rdma_keys_do_not_count_as_a_second_family() -> None:
    """Two accelerator families in one container are refused; an RDMA key beside one is not a
    second family, in whichever mode."""
    for key in RDMA_KEYS:
        assert validate(pod(container("main", {"nvidia.com/gpu": "2", key: "2"}))).allowed, key
    refused = validate(pod(container("main", {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"})))
    assert not refused.allowed
