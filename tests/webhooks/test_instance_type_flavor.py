"""The InstanceTypeFlavor catalog is read-only but to the worker (§2.3): every write that reaches the
guard is refused with what to do instead, and the configuration exempts the worker's own writes."""

from __future__ import annotations

import asyncio

import pytest

from tests.webhooks.reviews import review
from webhooks import configurations, instance_type_flavor
from webhooks import registry as webhook_registry
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review

ENTRY = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "InstanceTypeFlavor",
    "metadata": {"name": "gpustack--nvidia-a10g"},
    "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g"},
}
WORKER = "system:serviceaccount:gpustack-system:gpustack-operator-worker"


@pytest.mark.parametrize(
    ("operation", "new", "old", "word"),
    [
        ("CREATE", ENTRY, None, "created"),
        ("UPDATE", ENTRY, ENTRY, "edited"),
        ("DELETE", None, ENTRY, "deleted"),
    ],
)
def test_every_write_by_hand_is_refused(operation, new, old, word) -> None:
    raw = review(new, old=old, operation=operation, kind="InstanceTypeFlavor", resource="instancetypeflavors")
    raw["request"]["userInfo"] = {"username": "admin"}
    decision = asyncio.run(instance_type_flavor.guard(request_from_review(raw), FileLookups([])))
    assert not decision.allowed and decision.code == 405
    assert f"cannot be {word} by hand" in decision.message and "author an InstanceType" in decision.message


def test_the_configuration_lets_the_worker_write_the_catalog() -> None:
    (hook,) = [w for w in webhook_registry.WEBHOOKS if w.kind == "InstanceTypeFlavor"]
    assert set(hook.operations) == {"CREATE", "UPDATE", "DELETE"} and hook.scope == "Cluster"
    _, validating = configurations.render(
        url="https://127.0.0.1:31443", ca_bundle=b"ca", worker_identity=WORKER
    )
    entry = next(e for e in validating["webhooks"] if e["name"] == hook.name)
    assert entry["rules"][0]["resources"] == ["instancetypeflavors"] and entry["failurePolicy"] == "Fail"
    assert entry["matchConditions"] == [
        {"name": "not-the-worker", "expression": f"request.userInfo.username != '{WORKER}'"}
    ]
