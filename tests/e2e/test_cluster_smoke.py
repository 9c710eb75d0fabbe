"""Smoke test of the e2e control plane: Kueue admits a Pod onto a fake GPU node."""

from __future__ import annotations

import json
import subprocess
import uuid

import harness
import pytest

pytestmark = pytest.mark.e2e

GPU_CREDITS = 1600000  # credits.gpustack.ai/nvidia per nvidia.com/gpu (Kueue resource transformation)


def _pod(info: harness.ClusterInfo, ns: str, name: str) -> dict:
    return info.kubectl_json("get", "pod", name, "-n", ns)


def test_kueue_admits_pod_onto_fake_gpu_node(cluster: harness.ClusterInfo) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, node, rf, cq, lq = (
        f"smoke-{suffix}",
        f"smoke-gpu-{suffix}",
        f"smoke-rf-{suffix}",
        f"smoke-cq-{suffix}",
        "smoke-lq",
    )
    try:
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        harness.create_fake_node(
            cluster, node, labels={"gpustack.ai/smoke": suffix}, capacity={"nvidia.com/gpu": 8}
        )
        cluster.apply(
            [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": rf},
                    "spec": {"nodeLabels": {"gpustack.ai/smoke": suffix}},
                },
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": cq},
                    "spec": {
                        "namespaceSelector": {},
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu", "memory", "credits.gpustack.ai/nvidia"],
                                "flavors": [
                                    {
                                        "name": rf,
                                        "resources": [
                                            {"name": "cpu", "nominalQuota": "8"},
                                            {"name": "memory", "nominalQuota": "64Gi"},
                                            {
                                                "name": "credits.gpustack.ai/nvidia",
                                                "nominalQuota": str(8 * GPU_CREDITS),
                                            },
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                },
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": lq, "namespace": ns},
                    "spec": {"clusterQueue": cq},
                },
            ]
        )
        harness.wait_for_default_service_account(cluster, ns)

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-pod", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": lq}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/none:0",
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ]
            },
        }
        created = json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(pod)).stdout)
        # Kueue's pod webhook gated it (it must not reach the scheduler before admission).
        gates = [g["name"] for g in created["spec"].get("schedulingGates", [])]
        assert "kueue.x-k8s.io/admission" in gates, created["spec"]

        admitted = harness.wait_for(
            lambda: (p := _pod(cluster, ns, "gpu-pod"))["spec"].get("nodeName") and p,
            timeout=90,
            what="pod admitted by Kueue and bound to the fake node",
        )
        assert not admitted["spec"].get("schedulingGates"), admitted["spec"]
        assert admitted["spec"]["nodeName"] == node

        # The Workload was charged in credits, not in nvidia.com/gpu.
        wls = cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", ns)["items"]
        assert len(wls) == 1, wls
        usage = wls[0]["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert harness.parse_quantity(usage["credits.gpustack.ai/nvidia"]) == GPU_CREDITS, usage
        assert "nvidia.com/gpu" not in usage, usage

        running = harness.wait_for(
            lambda: (p := _pod(cluster, ns, "gpu-pod"))["status"].get("phase") == "Running" and p,
            timeout=60,
            what="pod Running on the kwok node",
        )
        assert running["status"]["phase"] == "Running"
    finally:
        # Namespace first, and wait: Kueue keeps a ClusterQueue's resource-in-use
        # finalizer while a Workload still reserves quota in it.
        harness.delete_namespace(cluster, ns, timeout=60)
        cluster.kubectl(
            "delete", "clusterqueue.kueue.x-k8s.io", cq, "--ignore-not-found", "--wait=false", check=False
        )
        cluster.kubectl(
            "delete", "resourceflavor.kueue.x-k8s.io", rf, "--ignore-not-found", "--wait=false", check=False
        )
        harness.delete_fake_node(cluster, node)


def test_in_process_delete_answers_as_kubectl_does(cluster: harness.ClusterInfo) -> None:
    """tests/cluster/restget.py answers plain deletes without forking kubectl: the same exit codes
    and messages as a forked kubectl for a missing object, a finalizer that holds the object past
    ``--timeout``, and the wait until it is gone."""
    name = f"restget-{uuid.uuid4().hex[:6]}"
    missing = ("delete", "configmap", name, "-n", "default")
    answered = cluster.kubectl(*missing, check=False)
    assert cluster.reader is not None and cluster.reader.answer(missing) is not None
    forked = subprocess.run(
        [str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig), *missing],
        capture_output=True,
        text=True,
        env=cluster.env(),
        timeout=60,
    )
    assert (answered.returncode, answered.stderr.strip()) == (forked.returncode, forked.stderr.strip())
    assert answered.returncode == 1 and "NotFound" in answered.stderr
    assert cluster.kubectl(*missing, "--ignore-not-found").returncode == 0

    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "finalizers": ["example.com/hold"]},
    }
    cluster.apply(held)
    timed_out = cluster.kubectl(*missing, "--timeout=1s", check=False)
    assert timed_out.returncode == 1 and "timed out waiting" in timed_out.stderr
    assert cluster.kubectl_json("get", "configmap", name, "-n", "default")["metadata"].get(
        "deletionTimestamp"
    )
    cluster.kubectl(
        "patch",
        "configmap",
        name,
        "-n",
        "default",
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"finalizers": []}}),
    )
    cluster.apply({**held, "metadata": {"name": name, "namespace": "default"}})  # a new object, a new uid
    done = cluster.kubectl(*missing, "--wait=true")
    assert done.returncode == 0 and f'configmap "{name}" deleted' in done.stdout
    assert (
        cluster.kubectl("get", "configmap", name, "-n", "default", "-o", "json", check=False).returncode == 1
    )


def test_in_process_create_and_apply_write_as_kubectl_does(cluster: harness.ClusterInfo) -> None:
    """tests/cluster/restget.py writes one new object without forking kubectl: the same output, the
    same field managers and the same last-applied annotation as a forked kubectl's write of a twin;
    a refused write is handed to kubectl, whose error the caller gets."""
    tag = uuid.uuid4().hex[:6]

    def config_map(name: str) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "<v>"}}

    def forked(*args: str, text: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig), *args],
            input=text,
            capture_output=True,
            text=True,
            env=cluster.env(),
            timeout=60,
        )

    def stored(name: str) -> dict:
        status, body = cluster.reader._request(f"/api/v1/namespaces/default/configmaps/{name}", 30)
        assert status == 200
        return json.loads(body)["metadata"]

    assert cluster.reader is not None
    try:
        for verb in ("create", "apply"):
            ours, theirs = f"rg-{verb}-{tag}", f"rg-{verb}-k-{tag}"
            args = (verb, "-f", "-", "-n", "default")
            assert cluster.reader.answer(args, 30, json.dumps(config_map(ours))) is not None
            kubectl_said = forked(*args, text=json.dumps(config_map(theirs)))
            assert kubectl_said.returncode == 0
            assert kubectl_said.stdout.replace(theirs, ours) == f"configmap/{ours} created\n"
            mine, kubectls = stored(ours), stored(theirs)
            assert [m["manager"] for m in mine["managedFields"]] == [
                m["manager"] for m in kubectls["managedFields"]
            ]
            assert (mine.get("annotations") or {}) == {
                k: v.replace(theirs, ours) for k, v in (kubectls.get("annotations") or {}).items()
            }
        # The forked kubectl patches what the in-process apply created, from its annotation.
        changed = {**config_map(f"rg-apply-{tag}"), "data": {"k": "w"}}
        patched = cluster.kubectl("apply", "-f", "-", "-n", "default", input=json.dumps(changed))
        assert patched.stdout == f"configmap/rg-apply-{tag} configured\n"

        dry = cluster.kubectl(
            "create",
            "--dry-run=server",
            "-f",
            "-",
            "-n",
            "default",
            input=json.dumps(config_map(f"rg-dry-{tag}")),
        )
        assert dry.stdout == f"configmap/rg-dry-{tag} created (server dry run)\n"
        assert (
            cluster.kubectl(
                "get", "configmap", f"rg-dry-{tag}", "-n", "default", "-o", "json", check=False
            ).returncode
            == 1
        )

        again = cluster.kubectl(
            "create",
            "-f",
            "-",
            "-n",
            "default",
            input=json.dumps(config_map(f"rg-create-{tag}")),
            check=False,
        )
        assert again.returncode == 1
        assert f'configmaps "rg-create-{tag}" already exists' in again.stderr
        assert again.stderr.startswith('Error from server (AlreadyExists): error when creating "STDIN"')
    finally:
        for name in ("create", "create-k", "apply", "apply-k"):
            cluster.kubectl("delete", "configmap", f"rg-{name}-{tag}", "-n", "default", "--ignore-not-found")
