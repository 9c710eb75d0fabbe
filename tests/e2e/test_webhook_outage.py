"""With the worker stopped, a Fail webhook refuses and an Ignore one lets through, as configured;
and the operator's own namespace and kube-system are never locked out."""

from __future__ import annotations

import json

import pytest

from tests.cases import pods

from .conftest import ensure_namespace, gpustack

pytestmark = pytest.mark.e2e

NS = "outage"


def test_stopped_worker_fail_refuses_ignore_admits(cluster, webhooks):
    ensure_namespace(cluster, NS)
    gpustack.stop_worker(webhooks)
    try:
        pod = pods.case_pod(pods.CASES[0])
        pod["metadata"].update(name="while-down", namespace=NS)
        refused = cluster.kubectl("create", "-f", "-", input=json.dumps(pod), check=False)
        assert refused.returncode != 0
        assert (
            "mutate.gpustack-worker.core.v1.pod" in refused.stderr
            and "failed calling webhook" in refused.stderr
        )
        # The Workload fit pin is advisory (failurePolicy Ignore): a Workload is still admitted.
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "while-down", "namespace": NS},
            "spec": {
                "queueName": pods.QUEUES["nvidia-a10g"],
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "m",
                                        "image": "x",
                                        "resources": {"requests": {"nvidia.com/gpu.shared": "2"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        }
        cluster.kubectl("create", "-f", "-", input=json.dumps(workload))
        # Excluded namespaces are never locked out, even for a queued accelerator Pod.
        pod["metadata"].update(name="system-pod", namespace="gpustack-system")
        cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    finally:
        cluster.kubectl(
            "delete", "pod", "system-pod", "-n", "gpustack-system", "--ignore-not-found", "--wait=false"
        )
        gpustack.start_worker(cluster, webhooks, "--webhooks-only")
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
