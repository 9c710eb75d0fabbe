"""``gpustack-operator admit`` end to end: files in, one JSON line per document out."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.cases import pods

KEYS = {
    "file",
    "index",
    "decision",
    "kind",
    "namespace",
    "name",
    "operation",
    "allowed",
    "code",
    "message",
    "warnings",
    "patch",
    "object",
}


def admit(tmp_path, documents, *extra):
    objects = tmp_path / "objects"
    objects.mkdir(exist_ok=True)
    (objects / "types.yaml").write_text(yaml.safe_dump_all(pods.INSTANCE_TYPES))
    manifests = tmp_path / "in.yaml"
    manifests.write_text(yaml.safe_dump_all(documents))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpustack_operator",
            "admit",
            "--objects",
            str(objects),
            "-f",
            str(manifests),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return result.returncode, lines


def case(case_id):
    return pods.case_pod(next(c for c in pods.CASES if c.id == case_id))


def test_all_allowed_exits_0_with_the_folded_object_and_patch(tmp_path):
    code, lines = admit(tmp_path, [case("nvidia-slice-40-percent"), case("nvidia-whole")])
    assert code == 0
    assert [set(line) for line in lines] == [KEYS, KEYS]
    sliced = lines[0]
    assert sliced["allowed"] and sliced["kind"] == "Pod" and sliced["namespace"] == pods.NAMESPACE
    assert (
        sliced["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"]
        == "640k"
    )
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units",
        "value": "640k",
    } in sliced["patch"]
    assert lines[1]["patch"] == []


def test_any_denial_exits_1_and_names_the_field(tmp_path):
    code, lines = admit(tmp_path, [case("nvidia-whole"), case("ascend-slice-three")])
    assert code == 1
    assert lines[0]["allowed"] is True
    denied = lines[1]
    assert denied["allowed"] is False and denied["code"] == 422 and denied["object"] is None
    assert "spec.containers[0].resources.limits[huawei.com/npu.sliced]" in denied["message"]


def test_a_pod_without_the_queue_label_passes_untouched(tmp_path):
    pod = case("ascend-slice-three")
    pod["metadata"]["labels"] = {}
    code, lines = admit(tmp_path, [pod])
    assert code == 0 and lines[0]["patch"] == []


def test_our_kinds_are_judged_by_their_schema_first(tmp_path):
    bad = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "m", "namespace": "team-a"},
        "spec": {
            "model": {"name": "x"},
            "engine": {"name": "TensorRT"},
            "roles": [{"name": "server", "instanceType": "e2e-nvidia-a10g"}],
        },
    }
    code, lines = admit(tmp_path, [bad])
    assert code == 1
    assert "spec.engine.name" in lines[0]["message"] and "Unsupported value" in lines[0]["message"]


def test_instance_type_update_with_old(tmp_path):
    stored = {k: v for k, v in pods.INSTANCE_TYPES[0].items() if k != "status"}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(stored))
    edited = json.loads(json.dumps(stored))
    edited["spec"]["unitResources"]["cpu"] = "16"
    code, lines = admit(tmp_path, [edited], "--operation", "UPDATE", "--old", str(tmp_path / "old.yaml"))
    assert code == 1 and lines[0]["operation"] == "UPDATE"
    assert "spec.unitResources" in lines[0]["message"]
