"""The smallest reproduction of a pool that does not fill: plain Kueue, nothing of the operator's
(docs/scheduling.md, "What went wrong").

    tests/cluster/up.sh                              # a control plane with Kueue (no operator)
    python -m loadtests.kueue_tas_repro --nodes 2 --pods 12
    python -m loadtests.kueue_tas_repro --nodes 2 --pods 12 --mixed

Against a local control plane where the operator is not installed (no webhook of ours, no gate 3),
it creates only what Kueue needs — kwok nodes, a hostname-level Topology, one topology-aware
ResourceFlavor, a ClusterQueue whose quota is the credits of ``--nodes`` 8-card nodes, a LocalQueue —
and ``--pods`` Pods asking for ``nvidia.com/gpu: 1``, which the cluster's Kueue configuration turns
into ``credits.gpustack.ai/nvidia: 1600000`` (the same transformations the chart renders).  Each
node advertises 8 whole cards and, as the operator's compatibility switch does on Kueue releases
without the fix of kubernetes-sigs/kueue#12005, ``8 × 1,600,000`` credits.  With ``--mixed`` the
first node has 6 whole cards (two are in MIG mode) but still 8 cards of credits, as that switch
counted them.

After ``--wait`` seconds it prints where the Pods are (bound to a node, still gated by Kueue, or
admitted by Kueue but unschedulable), what Kueue says about the waiting ones, and Kueue's admission
attempts in that time.  It deletes what it created unless
``--keep``.  Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "cluster"))

import harness  # noqa: E402

from kube.client import ApiError, Client, load_api_client  # noqa: E402
from loadtests.bench_pool_fill import KueueMetrics, emit  # noqa: E402

NAME = "tas-repro"
NAMESPACE = "tas-repro"
M = 1_600_000
KUEUE = "kueue.x-k8s.io/v1beta2"


def objects(nodes: int, mixed: bool) -> list[dict]:
    out: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": NAME},
            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": NAME},
            "spec": {
                "nodeLabels": {NAME: "true"},
                "topologyName": NAME,
                "tolerations": [{"operator": "Exists"}],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": NAME},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["credits.gpustack.ai/nvidia", "cpu"],
                        "flavors": [
                            {
                                "name": NAME,
                                "resources": [
                                    {
                                        "name": "credits.gpustack.ai/nvidia",
                                        "nominalQuota": str(nodes * 8 * M),
                                    },
                                    {"name": "cpu", "nominalQuota": "1000"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"clusterQueue": NAME},
        },
    ]
    for i in range(nodes):
        whole = 6 if mixed and i == 0 else 8
        out.append(
            harness.fake_node_manifest(
                f"{NAME}-{i}",
                labels={NAME: "true"},
                capacity={"nvidia.com/gpu": str(whole), "credits.gpustack.ai/nvidia": str(8 * M)},
            )
        )
    return out


def pod(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{NAME}-{i}",
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": NAME},
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {
                        "requests": {"cpu": "10m", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--pods", type=int, default=12)
    parser.add_argument(
        "--mixed", action="store_true", help="the first node has 2 of its 8 cards in MIG mode"
    )
    parser.add_argument("--wait", type=float, default=60.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    info = harness.info()
    client = Client(load_api_client(str(info.kubeconfig), component="bench"), timeout=60)
    configs = [c["metadata"]["name"] for c in client.list("MutatingWebhookConfiguration")[0]]
    if "gpustack-worker-mutation" in configs:
        emit(error="the operator's webhooks are installed here: run this against a cluster without it")
        return 2
    made = objects(args.nodes, args.mixed)
    info.apply(made)
    harness.wait_for_default_service_account(info, NAMESPACE)
    metrics = KueueMetrics(info, NAMESPACE)
    try:
        harness.wait_for(
            lambda: all(harness.node_is_ready(info, f"{NAME}-{i}") for i in range(args.nodes)),
            timeout=60,
            what="the kwok nodes Ready",
        )
        before = metrics.attempts()
        for i in range(args.pods):
            client.create(pod(i))
        time.sleep(args.wait)  # a fixed window: the figure is what Kueue does in it
        attempts = metrics.attempts() - before
        pods, _ = client.list("Pod", NAMESPACE)
        placed = Counter(
            p["spec"].get("nodeName")
            or ("(gated by Kueue)" if p["spec"].get("schedulingGates") else "(admitted, unschedulable)")
            for p in pods
        )
        workloads, _ = client.list("Workload", NAMESPACE)
        waiting = Counter(
            c.get("message")
            for w in workloads
            if not (w.get("status") or {}).get("admission")
            for c in (w.get("status") or {}).get("conditions") or ()
            if c.get("type") == "QuotaReserved"
        )
        emit(
            kueue=info.versions.get("KUEUE_VERSION"),
            nodes=args.nodes,
            mixed=args.mixed,
            pods=args.pods,
            seconds=args.wait,
            placed=dict(placed),
            waiting=dict(waiting),
            kueue_attempts=attempts,
        )
    finally:
        if not args.keep:
            info.kubectl("delete", "namespace", NAMESPACE, "--wait=true", timeout=120, check=False)
            for obj in reversed(made):
                if obj["kind"] != "Namespace":
                    with contextlib.suppress(ApiError):
                        client.delete(
                            obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace", "")
                        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
