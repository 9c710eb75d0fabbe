"""ModelDeployment admission through the real apiserver, edited the ways users edit it:
``kubectl apply``, ``kubectl patch --type=merge`` and ``--type=json``.

The InstanceTypes are admin-authored (spec only); their status is the controllers': a kwok A10G
node whose publish-only device manager writes its ``Devices``, and the worker (controllers and
webhooks) turning it into each type's phase, entrance and views.
"""

from __future__ import annotations

import json

import gpustack
import harness
import nodes
import pytest

from tests.cases.pods import _type as instance_type

from .conftest import ensure_namespace

pytestmark = pytest.mark.e2e

NS = "md-e2e"
A10G = "e2e-md-a10g"
GENERIC = "e2e-md-generic"
GONE = "e2e-md-gone"  # deleted by a test, with a deployment still naming it
TYPES = [
    instance_type(A10G, "nvidia-a10g", "nvidia", "24Gi", logical=512),
    instance_type(GENERIC, None, "", "", observed=False),
    instance_type(GONE, "nvidia-a10g", "nvidia", "24Gi", logical=512),
]
NODE = "md-adm-a10g"
SLOT = 25  # this module's device-manager port (tests/cluster/nodes.py)
WAIT = 180


def deployment(name: str, **role_fields) -> dict:
    role = {
        "name": "server",
        "replicas": 1,
        "instanceType": A10G,
        "extraArgs": ["--tensor-parallel-size", "1", "--max-model-len", "8192"],
        **role_fields,
    }
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [{k: v for k, v in role.items() if v is not None}],
        },
    }


def _active(cluster, names) -> bool:
    found = {t["metadata"]["name"]: t for t in cluster.kubectl_json("get", "instancetypes")["items"]}
    return all(
        ((found.get(name) or {}).get("status") or {}).get("phase") == "Active"
        and ((found[name].get("status") or {}).get("detail") or {}).get("manufacturer") == "nvidia"
        for name in names
    )


@pytest.fixture(scope="module")
def md_cluster(cluster):
    op = gpustack.install(cluster)
    try:
        nodes.start_node(cluster, NODE, "a10g-4.yaml", slot=SLOT, real=False)
        ensure_namespace(cluster, NS)
        for obj in TYPES:
            cluster.apply({k: v for k, v in obj.items() if k != "status"})
        gpustack.start_worker(cluster, op, "--no-leader-election")
        harness.wait_for(
            lambda: _active(cluster, (A10G, GONE)), timeout=WAIT, what=f"{A10G} and {GONE} Active"
        )
        yield cluster
    finally:
        harness.delete_namespace(cluster, NS, timeout=90)
        nodes.take_down(cluster, op, [NODE], WAIT, "e2e md admission teardown")


def apply(cluster, obj, *extra):
    return cluster.kubectl("apply", *extra, "-f", "-", input=json.dumps(obj), check=False)


def test_apply_defaults_the_accelerator_from_the_instance_type(md_cluster):
    result = apply(md_cluster, deployment("chat"))
    assert result.returncode == 0, result.stderr
    stored = md_cluster.kubectl_json("get", "md", "chat", "-n", NS)
    assert stored["spec"]["roles"][0]["resources"]["accelerator"] in ("1", 1)
    assert stored["spec"]["roles"][0].get("size") == 1  # the schema's default


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"extraArgs": ["--kv_transfer_config={}"]}, "spec.roles[0].extraArgs[0]"),
        ({"extraArgs": ["--kv-transfer-conf", "{}"]}, "spec.roles[0].extraArgs[0]"),
        ({"env": [{"name": "GPUSTACK_MEMBER_INDEX", "value": "0"}]}, "spec.roles[0].env[0]"),
        ({"extraArgs": ["-tp", "two"]}, "spec.roles[0]"),
        (
            {"extraArgs": ["--tensor-parallel-size", "4"], "resources": {"accelerator": "2"}},
            "spec.roles[0].resources.accelerator",
        ),
        ({"topology": {"requiredLevel": "kubernetes.io/hostname"}}, "spec.roles[0].topology.requiredLevel"),
        ({"instanceType": "no-such-type"}, "spec.roles[0].instanceType"),
    ],
)
def test_refusals_reach_kubectl_with_their_field(md_cluster, fields, path):
    result = apply(md_cluster, deployment("refused", **fields))
    assert result.returncode != 0, "admitted"
    assert path in result.stderr, result.stderr
    assert md_cluster.kubectl("get", "md", "refused", "-n", NS, check=False).returncode != 0


def test_json_patch_scales_and_refuses_frozen_fields(md_cluster):
    assert apply(md_cluster, deployment("scaled")).returncode == 0
    scaled = md_cluster.kubectl(
        "patch",
        "md",
        "scaled",
        "-n",
        NS,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/roles/0/replicas","value":3}]',
        check=False,
    )
    assert scaled.returncode == 0, scaled.stderr
    assert md_cluster.kubectl_json("get", "md", "scaled", "-n", NS)["spec"]["roles"][0]["replicas"] == 3
    size = md_cluster.kubectl(
        "patch",
        "md",
        "scaled",
        "-n",
        NS,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/roles/0/size","value":2}]',
        check=False,
    )
    assert size.returncode != 0 and "size" in size.stderr
    moved = md_cluster.kubectl(
        "patch",
        "md",
        "scaled",
        "-n",
        NS,
        "--type=json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/roles/0/instanceType", "value": GENERIC}]),
        check=False,
    )
    assert moved.returncode != 0 and "spec.roles[0].instanceType" in moved.stderr


def test_merge_patch_restating_a_role_without_its_command_is_an_edit_of_command(md_cluster):
    taken_over = deployment(
        "takeover", command=["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000"], extraArgs=None
    )
    assert apply(md_cluster, taken_over).returncode == 0
    role = {"name": "server", "replicas": 2, "instanceType": A10G, "resources": {"accelerator": "1"}}
    patched = md_cluster.kubectl(
        "patch",
        "md",
        "takeover",
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"roles": [role]}}),
        check=False,
    )
    assert patched.returncode != 0
    assert "spec.roles[0].command" in patched.stderr, patched.stderr


def test_finalizer_clearing_update_passes_after_the_instance_type_is_gone(md_cluster):
    held = deployment("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    held["spec"]["roles"][0]["instanceType"] = GONE
    assert apply(md_cluster, held).returncode == 0
    md_cluster.kubectl("delete", "instancetype", GONE, "--wait=true", "--timeout=120s")
    md_cluster.kubectl("delete", "md", "held", "-n", NS, "--wait=false")
    cleared = md_cluster.kubectl(
        "patch",
        "md",
        "held",
        "-n",
        NS,
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/metadata/finalizers"}]',
        check=False,
    )
    assert cleared.returncode == 0, cleared.stderr
    assert md_cluster.kubectl("get", "md", "held", "-n", NS, check=False).returncode != 0
