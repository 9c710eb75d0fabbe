"""Benchmark of a pool filling (docs/scheduling.md): Kueue's topology-aware placement and gate 3
over a pool of many nodes.

    tests/cluster/up.sh                        # a control plane (own GPUSTACK_CLUSTER_DIR/ports if shared)
    python -m loadtests.bench_pool_fill --nodes 100

It installs the operator and starts the worker (webhooks and every controller, as a process, as a
cluster runs it), creates ``--nodes`` kwok nodes of 8 × Tesla T4 (a product ``make dev`` does not
simulate, so the pool is the benchmark's alone) with the ``Devices`` ledgers and node labels their
device managers would publish — the one thing written for our components, as the other scale
benchmarks do: a hundred device managers do not fit two cores — and fills the pool through its
entrance, one phase after the other:

- ``whole``: one one-card Pod per card (``8 × nodes``);
- ``sliced``: ``100 / --slice-percent`` slices per card, once the whole-card Pods are gone;
- ``waiting``: one more Pod of each family while the pool is full, watched for ``--idle`` seconds.

Per phase it prints the seconds from the first create to the last Workload admitted, the gate-3
``Retry`` answers per admitted Workload (its ``NodeDevicesDoNotFit`` Events; the target is 0 when
nothing races), Kueue's admission attempts per admitted Workload (``kueue_admission_attempts_total``,
successes and inadmissible ones: a scheduling cycle that tried a Workload) and the CPU seconds of
the worker and of Kueue.  Kwok nodes run no device plugin, so no card is ever allocated: gate 3 and
the fit labels account for the admitted Pods as promises, which is what they do for every Pod
between admission and allocation.  Prints one JSON object per figure; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "cluster"))

import gpustack  # noqa: E402  (tests/cluster/gpustack.py)
import harness  # noqa: E402

from api import constants  # noqa: E402
from kube.client import ApiError, Client, load_api_client  # noqa: E402
from loadtests import bench_pools  # noqa: E402

POOL = bench_pools.POOL
NAMESPACE = "bench-pool-fill"
METRICS_SA = "bench-pool-fill-metrics"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def emit(**figures: Any) -> None:
    print(json.dumps(figures), flush=True)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process and its reaped children (0 when it is gone)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / CLK_TCK


def kueue_pid(info: harness.ClusterInfo) -> int | None:
    try:
        return int((info.state_dir / "pids" / "kueue.pid").read_text().strip())
    except (OSError, ValueError):
        return None


class KueueMetrics:
    """Kueue's /metrics, read with a token of a ServiceAccount allowed to (Kueue checks it)."""

    def __init__(self, info: harness.ClusterInfo, namespace: str = NAMESPACE) -> None:
        self.url = f"https://127.0.0.1:{info.endpoints['KUEUE_METRICS_PORT']}/metrics"
        info.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": METRICS_SA, "namespace": namespace},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": METRICS_SA},
                    "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": METRICS_SA},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": METRICS_SA,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": METRICS_SA, "namespace": namespace}],
                },
            ]
        )
        self.token = info.kubectl(
            "create", "token", METRICS_SA, "-n", namespace, "--duration=2h"
        ).stdout.strip()
        self.context = ssl.create_default_context(cafile=str(info.ca_cert))
        self.context.check_hostname = False

    def attempts(self) -> int:
        """Every admission attempt so far (each is one Workload tried in a scheduling cycle)."""
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
            text = response.read().decode()
        return int(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("kueue_admission_attempts_total{")
            )
        )


def pod(name: str, queue: str, limits: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {constants.KUEUE_QUEUE_NAME: queue}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"requests": {"cpu": "10m", **limits}, "limits": limits},
                }
            ],
        },
    }


def workloads_with(client: Client, condition: str, status: str) -> int:
    """Workloads of the namespace whose ``condition`` has ``status``."""
    items, _ = client.list("Workload", NAMESPACE)
    return sum(
        1
        for w in items
        if any(
            c.get("type") == condition and c.get("status") == status
            for c in (w.get("status") or {}).get("conditions") or ()
        )
    )


def admitted(client: Client) -> int:
    return workloads_with(client, "Admitted", "True")


def pending(client: Client) -> int:
    """Workloads Kueue looked at and could not admit (``QuotaReserved`` False)."""
    return workloads_with(client, "QuotaReserved", "False")


def retries(client: Client) -> int:
    """Gate 3's ``Retry`` answers so far (each verdict is an Event; repeats are counted on it)."""
    items, _ = client.list("Event", NAMESPACE, field_selector="reason=NodeDevicesDoNotFit")
    return sum(int(e.get("count") or 1) for e in items)


def clear(client: Client, info: harness.ClusterInfo, timeout: float) -> None:
    info.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--grace-period=0", "--wait=false", check=False)
    harness.wait_for(
        lambda: not client.list("Workload", NAMESPACE)[0] and not client.list("Pod", NAMESPACE)[0],
        timeout=timeout,
        interval=0.5,
        what="the pool empty again",
    )


class Phase:
    """One fill: the figures of sending ``count`` Pods of ``limits`` until all are admitted."""

    def __init__(self, client: Client, metrics: KueueMetrics, pids: dict[str, int | None]) -> None:
        self.client, self.metrics, self.pids = client, metrics, pids

    def run(
        self, name: str, queue: str, count: int, limits: dict[str, str], threads: int, timeout: float
    ) -> bool:
        cpu = {k: cpu_seconds(p) for k, p in self.pids.items()}
        attempts, before = self.metrics.attempts(), retries(self.client)
        started = time.monotonic()
        with ThreadPoolExecutor(threads) as workers:
            list(workers.map(lambda i: self.client.create(pod(f"{name}-{i}", queue, limits)), range(count)))
        sent = time.monotonic() - started
        done = 0
        while time.monotonic() - started < timeout:
            done = admitted(self.client)
            if done >= count:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        tried = self.metrics.attempts() - attempts
        gate3 = retries(self.client) - before
        emit(
            phase=name,
            pods=count,
            admitted=done,
            sent_s=round(sent, 1),
            fill_s=round(elapsed, 1),
            gate3_retries=gate3,
            gate3_retries_per_admitted=round(gate3 / max(done, 1), 3),
            kueue_attempts=tried,
            kueue_attempts_per_admitted=round(tried / max(done, 1), 2),
            **{f"{k}_cpu_s": round(cpu_seconds(p) - cpu[k], 1) for k, p in self.pids.items()},
        )
        return done >= count


def idle(
    client: Client, metrics: KueueMetrics, pids: dict[str, int | None], queue: str, seconds: float
) -> None:
    """One Pod of each family waiting on a full pool: what Kueue and the worker spend meanwhile."""
    for family, limits in (
        ("whole", {"nvidia.com/gpu": "1"}),
        ("slice", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}),
        ("share", {"nvidia.com/gpu.shared": "2"}),
    ):
        client.create(pod(f"waiting-{family}", queue, limits))
    # The window opens once Kueue judged the three at least once (each Workload pending with
    # QuotaReserved=False), so their first verdicts are not counted as the idle pool's.
    harness.wait_for(lambda: pending(client) >= 3, timeout=60, what="a verdict on each waiting Pod")
    cpu = {k: cpu_seconds(p) for k, p in pids.items()}
    attempts, gate3 = metrics.attempts(), retries(client)
    time.sleep(seconds)
    emit(
        phase="waiting",
        seconds=seconds,
        kueue_attempts=metrics.attempts() - attempts,
        gate3_retries=retries(client) - gate3,
        **{f"{k}_cpu_s": round(cpu_seconds(p) - cpu[k], 2) for k, p in pids.items()},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument(
        "--slice-percent", type=int, default=50, help="each slice's share of a card (default 50)"
    )
    parser.add_argument("--idle", type=float, default=60.0, help="seconds to watch a full pool (default 60)")
    parser.add_argument("--threads", type=int, default=8, help="concurrent writers (default 8)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)

    info = harness.info()
    client = Client(load_api_client(str(info.kubeconfig)), timeout=60)
    op = gpustack.install(info)
    gpustack.ensure_namespace(info, NAMESPACE)
    harness.wait_for_default_service_account(info, NAMESPACE)
    pid = gpustack.start_worker(info, op)
    names = [bench_pools.node_name(i) for i in range(args.nodes)]
    with ThreadPoolExecutor(args.threads) as workers:
        list(workers.map(lambda n: bench_pools.create_node_and_ledger(client, n), names))
    pids = {"worker": pid, "kueue": kueue_pid(info)}
    try:
        queue = harness.wait_for(
            lambda: ((client.get("InstanceType", POOL) or {}).get("status") or {}).get("entrance"),
            timeout=args.timeout,
            what="the pool's entrance",
        )
        harness.wait_for(
            lambda: client.get("LocalQueue", queue, NAMESPACE) is not None,
            timeout=120,
            what="the pool's LocalQueue in the benchmark namespace",
        )
        harness.wait_for(
            lambda: bench_pools.summary(client).startswith(
                f"{bench_pools.CARDS}/{bench_pools.CARDS * args.nodes} "
            ),
            timeout=args.timeout,
            what="every card in the pool's views",
        )
        metrics = KueueMetrics(info)
        phase = Phase(client, metrics, pids)
        cards = bench_pools.CARDS * args.nodes
        if phase.run("whole", queue, cards, {"nvidia.com/gpu": "1"}, args.threads, args.timeout):
            idle(client, metrics, pids, queue, args.idle)
        clear(client, info, args.timeout)
        per_card = 100 // args.slice_percent
        sliced = {
            "nvidia.com/gpu.sliced": "1",
            "nvidia.com/gpu.sliced.memory-percentage": str(args.slice_percent),
        }
        phase.run("sliced", queue, cards * per_card, sliced, args.threads, args.timeout)
    finally:
        if not args.keep:
            try:
                clear(client, info, args.timeout)
                bench_pools.cleanup(client, names, args.threads)  # the worker retires the pool
            except (ApiError, TimeoutError, subprocess.TimeoutExpired) as error:
                emit(phase="cleanup", error=str(error))
            gpustack.stop_worker(op)
            gpustack.uninstall_webhooks(info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
