"""Gate 1 through the real kube-apiserver: kubectl → apiserver → our webhooks → etcd.

The same cases as tests/webhooks/test_pod_cases.py (the offline chain ``admit`` runs): what the
apiserver stores must carry the folded keys, and a refusal's message must reach kubectl.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.cases import pods
from webhooks import chain
from webhooks.lookups import FileLookups

from .conftest import ensure_namespace

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pools(cluster, webhooks):
    ensure_namespace(cluster, pods.NAMESPACE)
    for instance_type in pods.INSTANCE_TYPES:
        body = {k: v for k, v in instance_type.items() if k != "status"}
        cluster.apply(body)
        cluster.kubectl(
            "patch",
            "instancetype",
            instance_type["metadata"]["name"],
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": instance_type["status"]}),
        )
    yield
    cluster.kubectl("delete", "namespace", pods.NAMESPACE, "--ignore-not-found", "--wait=false")
    for instance_type in pods.INSTANCE_TYPES:
        cluster.kubectl(
            "delete", "instancetype", instance_type["metadata"]["name"], "--ignore-not-found", "--wait=false"
        )


@pytest.mark.parametrize("case", pods.CASES, ids=lambda c: c.id)
def test_pod_case_through_the_apiserver(cluster, pools, case):
    manifest = json.dumps(pods.case_pod(case))
    name = case.pod["metadata"]["name"]
    cluster.kubectl("delete", "pod", name, "-n", pods.NAMESPACE, "--ignore-not-found", "--wait=true")
    created = cluster.kubectl("create", "-f", "-", input=manifest, check=False)
    if not case.allowed:
        assert created.returncode != 0, f"{case.id} was admitted"
        if case.code:  # a retryable denial carries no field causes: kubectl shows the webhook's words
            assert "denied the request" in created.stderr and "retry" in created.stderr
        else:  # kubectl lists the causes of an Invalid status under the object's name
            assert f'The Pod "{name}" is invalid' in created.stderr, created.stderr
        assert case.path in created.stderr, created.stderr
        return
    assert created.returncode == 0, created.stderr
    stored = cluster.kubectl_json("get", "pod", name, "-n", pods.NAMESPACE)
    assert pods.stored_limit_problems(case, stored) == []
    # What the apiserver stored carries exactly what admit computes offline.
    offline = asyncio.run(chain.run(pods.case_pod(case), FileLookups(pods.INSTANCE_TYPES))).object
    for live, expected in zip(stored["spec"]["containers"], offline["spec"]["containers"], strict=True):
        assert live.get("resources", {}).get("limits") == expected.get("resources", {}).get("limits")


def test_pod_without_queue_label_is_untouched(cluster, pools):
    pod = pods.case_pod(pods.CASES[0])
    pod["metadata"]["name"] = "no-queue-label"
    pod["metadata"]["labels"] = {}
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu.sliced": "3"}}
    cluster.kubectl("delete", "pod", "no-queue-label", "-n", pods.NAMESPACE, "--ignore-not-found")
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    stored = cluster.kubectl_json("get", "pod", "no-queue-label", "-n", pods.NAMESPACE)
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu.sliced": "3"}


def test_server_side_dry_run_runs_the_webhooks_and_stores_nothing(cluster, pools):
    case = next(c for c in pods.CASES if c.id == "nvidia-slice-40-percent")
    pod = pods.case_pod(case)
    pod["metadata"]["name"] = "dry-run"
    result = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    assert (
        json.loads(result.stdout)["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu.sliced.units"
        ]
        == "640k"  # the apiserver's canonical 640,000
    )
    assert cluster.kubectl("get", "pod", "dry-run", "-n", pods.NAMESPACE, check=False).returncode != 0
    bad = next(c for c in pods.CASES if c.id == "ascend-slice-three")
    refused = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pods.case_pod(bad)), check=False
    )
    assert refused.returncode != 0 and bad.path in refused.stderr


def test_apiserver_metrics_show_the_calls_went_through_it(cluster, pools):
    metrics = cluster.kubectl("get", "--raw", "/metrics").stdout
    wanted = [
        line
        for line in metrics.splitlines()
        if line.startswith("apiserver_admission_webhook_admission_duration_seconds_count")
        and 'name="mutate.gpustack-worker.core.v1.pod"' in line
    ]
    assert wanted and any(float(line.rsplit(" ", 1)[1]) > 0 for line in wanted)
    rejections = [
        line
        for line in metrics.splitlines()
        if line.startswith("apiserver_admission_webhook_rejection_count")
        and 'name="validate.gpustack-worker.core.v1.pod"' in line
    ]
    assert rejections and any(float(line.rsplit(" ", 1)[1]) > 0 for line in rejections)
