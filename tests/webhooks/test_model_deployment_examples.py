"""The seed's ModelDeployment examples (examples/5*.yaml, examples/alternatives/50-*.yaml) are admitted
against suitable cluster objects: by the two handlers, and by the whole chain ``admit`` runs (the CRD
schema's defaults and validation, then the mutating and the validating webhook)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import yaml

from tests.webhooks import objects
from tests.webhooks.model_deployments import request
from webhooks import chain, modeldeployment
from webhooks import patch as jsonpatch
from webhooks.lookups import FileLookups

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("5*.yaml")) + sorted(
    (ROOT / "examples/alternatives").glob("50-*.yaml")
)


H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["metadata"].setdefault("namespace", "team-a")  # kubectl apply -n team-a
    return doc


def cluster_objects() -> list[dict]:
    """What the examples name, as the operator names pools: the A10G InstanceType (observed), the
    H100 type the prefill/decode example names (`make dev`'s), and the KV chain of examples/30–32 (plus the
    minimal page's team-a-dram Binding on the same pool)."""
    found = [
        objects.instance_type("gpustack--nvidia-a10g-linux-amd64", logical=32),
        objects.instance_type(H100, group="nvidia-h100-80gb-hbm3", memory="80Gi", cpu="12", ram="192Gi"),
    ]
    for name in (
        "30-kvcachebackend-mooncake-dram",
        "31-kvcachepool-shared-dram",
        "32-kvcachepoolbinding-qwen-cache",
    ):
        found.append(yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text()))
    team = copy.deepcopy(found[-1])
    team["metadata"]["name"] = "team-a-dram"
    found.append(team)
    return found


def test_the_examples_are_found():
    assert {p.name for p in EXAMPLES} >= {
        "50-modeldeployment-qwen-chat.yaml",
        "51-modeldeployment-prefill-decode.yaml",
        "52-modeldeployment-qwen3-8b-topology.yaml",
        "50-modeldeployment-qwen-chat-minimal.yaml",
    }
    assert cluster_objects()[0]["status"]["detail"]["manufacturer"] == "nvidia"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_admitted_by_both_handlers(path):
    obj = load(path)
    lookups = FileLookups(cluster_objects())
    mutated = asyncio.run(modeldeployment.default(request(obj), lookups))
    assert mutated.allowed, mutated.message
    after = jsonpatch.apply(obj, mutated.patch)
    decision = asyncio.run(modeldeployment.validate(request(after), lookups))
    assert decision.allowed, decision.message


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_admitted_by_the_chain_and_updates_of_it_too(path):
    obj = load(path)
    lookups = FileLookups(cluster_objects())
    outcome = asyncio.run(chain.run(obj, lookups))
    assert outcome.allowed, outcome.message
    stored = outcome.object
    for role in stored["spec"]["roles"]:
        assert role["kind"] in ("Server", "Prefill", "Decode") and role["size"] >= 1
        assert role["resources"]["accelerator"] is not None
    # Scale it (what an edit most often is), and move a role's type (an identity edit).
    scaled = copy.deepcopy(stored)
    scaled["spec"]["roles"][0]["replicas"] = 3
    assert asyncio.run(chain.run(scaled, lookups, operation="UPDATE", old=stored)).allowed
    moved = copy.deepcopy(stored)
    current = moved["spec"]["roles"][0]["instanceType"]
    other = "gpustack--nvidia-a10g-linux-amd64"
    moved["spec"]["roles"][0]["instanceType"] = other if current != other else H100
    refused = asyncio.run(chain.run(moved, lookups, operation="UPDATE", old=stored))
    assert not refused.allowed and [c.path for c in refused.causes] == ["spec.roles[0].instanceType"]


def test_the_readme_deployment_is_defaulted_by_the_schema_and_attached_to_its_binding():
    obj = load(ROOT / "examples/50-modeldeployment-qwen-chat.yaml")
    outcome = asyncio.run(chain.run(obj, FileLookups(cluster_objects())))
    assert outcome.object["spec"]["kvCache"] == {"poolRef": {"name": "qwen-cache"}, "connector": "Mooncake"}
    assert {"op": "add", "path": "/spec/kvCache/connector", "value": "Mooncake"} in outcome.patch
    # The Binding is the authorization point: without it nothing else differs, and with a mixed
    # backend the new binding is refused (#37).
    mixed = cluster_objects()
    backend = next(o for o in mixed if o["kind"] == "KVCacheBackend")
    extra = copy.deepcopy(backend["spec"]["connection"]["managed"]["members"][0])
    extra["transport"] = {"protocol": "RDMA"}
    backend["spec"]["connection"]["managed"]["members"].append(extra)
    refused = asyncio.run(chain.run(obj, FileLookups(mixed)))
    assert not refused.allowed and [c.path for c in refused.causes] == ["spec.kvCache.poolRef.name"]


def test_the_prefill_decode_example_needs_its_instance_type():
    obj = load(ROOT / "examples/51-modeldeployment-prefill-decode.yaml")
    without = [o for o in cluster_objects() if o["metadata"]["name"] != H100]
    outcome = asyncio.run(chain.run(obj, FileLookups(without)))
    # Both roles state their cards, so the mutating half reads nothing; the validating half joins
    # both missing types.
    assert not outcome.allowed
    assert [c.path for c in outcome.causes] == ["spec.roles[0].instanceType", "spec.roles[1].instanceType"]
