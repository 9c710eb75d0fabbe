"""Scale benchmark of the pool controllers against a running local cluster.

    tests/cluster/up.sh                        # a control plane (own GPUSTACK_CLUSTER_DIR/ports if shared)
    python -m loadtests.bench_pools --nodes 100

It installs the CRDs, starts the pool controllers in this process (no leader election) — or, when
a worker already holds the ``worker.gpustack.ai`` Lease (``make dev``), measures that worker's
controllers instead of starting a second set that would fight them — creates ``--nodes`` kwok fake
nodes of 8 × Tesla T4 each (a product ``make dev`` does not simulate, so its pool is the
benchmark's alone) and their ``Devices`` ledgers, and measures, polling the InstanceType every
50 ms.  The benchmark is a load generator: it writes the inventory a thousand device managers would
publish, which no test may do.

- ``build``: from the last ``Devices`` write of the fresh nodes to the pool's InstanceType showing
  every card (``8/8N 8/80N 100/800N 0/0``), and to its ClusterQueue's nominal covering every node;
- ``burst``: every ledger rewritten (each card holding a 50 % slice) as fast as the client goes;
  from the last write to ``0/0 0/0 50/400N 0/0``;
- ``single``: one card freed on one node; from that write to the view moving.

It also reports how long every node took to carry its counting keys (read from the controllers' Node
cache when they run here), each controller's largest work-queue backlog during the writes and its
backlog when they ended, and this process's peak memory
(``memory``: the controllers and their informers; with ``--writers`` the writing is done elsewhere).
``--writers P`` writes the inventory from P processes of ``--threads`` threads each instead of
threads of this process, so that writing 10,000 nodes neither takes the controllers' interpreter
nor counts in their memory.  Prints one JSON object per
figure; asserts nothing.  A wait that runs out prints what it waited for and what it last saw.  ``--keep`` leaves the nodes and objects behind; otherwise they are
deleted (nodes first, so no type is authored again) before the controllers stop.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "cluster"))

import harness  # noqa: E402  (tests/cluster/harness.py)

from api import API_VERSION  # noqa: E402
from controllers.pools.cluster_queues import ClusterQueueReconciler  # noqa: E402
from controllers.pools.devices_labels import DevicesLabelReconciler  # noqa: E402
from controllers.pools.instance_types import InstanceTypeReconciler  # noqa: E402
from controllers.pools.local_queues import LocalQueueReconciler  # noqa: E402
from controllers.pools.node_capacity_keys import NodeCapacityReconciler  # noqa: E402
from controllers.pools.resource_flavors import ResourceFlavorReconciler  # noqa: E402
from kube.client import ApiError, Client, load_api_client  # noqa: E402
from kube.manager import RECONCILE_SECONDS, Manager  # noqa: E402
from loadtests import series  # noqa: E402
from nodeplugins.devicemanager import simulated  # noqa: E402

M = 1_600_000
CARDS = 8
PRODUCT = simulated.PRODUCTS["Tesla T4"]
POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
PREFIX = "bench-pools-"
POOL_CONTROLLERS = (
    ResourceFlavorReconciler,
    InstanceTypeReconciler,
    ClusterQueueReconciler,
    LocalQueueReconciler,
    NodeCapacityReconciler,
    DevicesLabelReconciler,
)


EMITTED: list[dict[str, Any]] = []  # this run's rows, for --series-out


def emit(**figures: Any) -> None:
    print(json.dumps(figures), flush=True)
    EMITTED.append(figures)


def node_name(i: int) -> str:
    return f"{PREFIX}{i:05d}"


def node_object(name: str) -> dict:
    return harness.fake_node_manifest(
        name,
        labels=simulated.node_labels(name, PRODUCT, CARDS),
        capacity=simulated.plugin_capacity(PRODUCT, CARDS),
    )


def ledger(name: str, percent: int = 0) -> dict:
    devices = simulated.devices(name, PRODUCT, CARDS)
    if percent:
        for row in devices["status"]["groups"][0]["accelerators"]:
            used = percent * M // 100
            row.update(mode=3, allocated=used, remaining=M - used, allocatedSlices=1)
    return devices


def write_status(client: Client, devices: dict) -> None:
    body = {
        "apiVersion": API_VERSION,
        "kind": "Devices",
        "metadata": {"name": devices["metadata"]["name"]},
        "status": devices["status"],
    }
    client.apply(body, field_manager="bench-device-manager", subresource="status")


def create_node_and_ledger(client: Client, name: str) -> None:
    try:
        client.create(node_object(name))
    except ApiError as error:
        if not error.conflict:
            raise
    devices = ledger(name)
    spec_only = {k: v for k, v in devices.items() if k != "status"}
    client.apply(spec_only, field_manager="bench-device-manager")
    write_status(client, devices)


def _write(client: Client, name: str, phase: str) -> None:
    if phase == "build":
        create_node_and_ledger(client, name)
    else:  # "burst": every card holding a 50 % slice
        write_status(client, ledger(name, 50))


def _write_chunk(kubeconfig: str, names: list[str], threads: int, phase: str) -> int:
    """One writer process's share (``--writers``): its own client and threads."""
    client = Client(load_api_client(kubeconfig), timeout=30.0)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda name: _write(client, name, phase), names))
    return len(names)


def write_inventory(
    client: Client, kubeconfig: str, names: list[str], phase: str, threads: int, writers: int
) -> None:
    """Write ``phase``'s objects for every node: from this process's threads, or from ``writers``
    processes (spawned: this one already runs the controllers' threads)."""
    if writers <= 1:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda name: _write(client, name, phase), names))
        return
    chunks = [names[i::writers] for i in range(writers)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(writers, mp_context=context) as pool:
        written = sum(
            pool.map(_write_chunk, [kubeconfig] * writers, chunks, [threads] * writers, [phase] * writers)
        )
    assert written == len(names)


def wait(
    what: str,
    observe: Callable[[], Any],
    want: Any,
    timeout: float,
    interval: float = 0.05,
) -> float | None:
    """Seconds until ``observe()`` equals ``want``; on timeout a JSON line says what was awaited
    and the last value seen, and None is returned."""
    started = time.monotonic()
    seen: Any = None
    while time.monotonic() - started < timeout:
        try:
            seen = observe()
            if seen == want:
                return time.monotonic() - started
        except ApiError as error:
            seen = f"API error: {error}"
        time.sleep(interval)
    emit(phase="timeout", waited_for=what, want=want, last_seen=seen, after_s=timeout)
    return None


def summary(client: Client) -> str:
    obj = client.get("InstanceType", POOL) or {}
    return (obj.get("status") or {}).get("acceleratorSummary") or ""


def nominal(client: Client) -> int:
    """The queue's nominal credits: only ``credits.gpustack.ai/*`` count (an accelerated queue
    also declares ``cpu`` unbounded on a Kueue without quotaCheckStrategy)."""
    queue = client.get("ClusterQueue", POOL) or {}
    groups = (queue.get("spec") or {}).get("resourceGroups") or []
    total = 0
    for group in groups:
        for flavor in group.get("flavors") or []:
            for quota in flavor.get("resources") or []:
                if str(quota.get("name", "")).startswith("credits.gpustack.ai/"):
                    total += int(harness.parse_quantity(quota["nominalQuota"]))
    return total


def running_worker(client: Client) -> str | None:
    """The identity holding the worker's Lease when it was renewed within its duration."""
    lease = client.get("Lease", "worker.gpustack.ai", "gpustack-system") or {}
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    if not holder or not renewed:
        return None
    at = dt.datetime.strptime(renewed.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    fresh = (dt.datetime.now(dt.UTC) - at).total_seconds() < float(spec.get("leaseDurationSeconds") or 15)
    return holder if fresh else None


def keyed_nodes(client: Client, manager: Manager | None) -> int:
    """Nodes carrying their counting keys: from the controllers' own Node cache when they run here
    (a list of 10,000 Nodes costs seconds, so polling the API server would time its own list), else
    from the API server."""
    items = manager.informer("Node").list() if manager else client.list("Node", label_selector="type=kwok")[0]
    return sum(
        1
        for n in items
        if n["metadata"]["name"].startswith(PREFIX)
        and "nvidia.com/gpu.sliced.units" in ((n.get("status") or {}).get("capacity") or {})
    )


class DepthSampler:
    """Every local controller's ready keys, sampled every ``interval`` s while writes go on: the
    largest backlog each had, and the one it had when the writes ended."""

    def __init__(self, manager: Manager | None, interval: float = 0.5) -> None:
        self.controllers = manager.controllers if manager else []
        self.interval = interval
        self.peak: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="depth-sampler", daemon=True)

    def __enter__(self) -> DepthSampler:
        if self.controllers:
            self._thread.start()
        return self

    def _sample(self) -> None:
        for c in self.controllers:
            self.last[c.name] = depth = len(c.queue)
            self.peak[c.name] = max(self.peak.get(c.name, 0), depth)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self.controllers:
            self._thread.join()
            self._sample()  # the backlog when the writes ended

    def figures(self) -> dict[str, Any]:
        return {name: {"peak": self.peak[name], "at_last_write": self.last[name]} for name in self.last}


def reconcile_figures() -> dict[str, Any]:
    """Per controller: reconciles run, their mean and the bucket holding the 99th percentile."""
    out: dict[str, Any] = {}
    for metric in RECONCILE_SECONDS.collect():
        counts: dict[str, list[tuple[float, float]]] = {}
        totals: dict[str, float] = {}
        for sample in metric.samples:
            name = sample.labels.get("controller", "")
            if sample.name.endswith("_bucket"):
                counts.setdefault(name, []).append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                totals[name] = sample.value
        for name, buckets in counts.items():
            total = buckets[-1][1]
            if not total:
                continue
            p99 = next(le for le, seen in sorted(buckets) if seen >= 0.99 * total)
            out[name] = {
                "count": int(total),
                "mean_ms": round(1000 * totals[name] / total, 2),
                "p99_le_ms": p99 * 1000,
            }
    return out


def start_controllers(client: Client) -> Manager:
    manager = Manager(client, leader_election=False)
    for controller in POOL_CONTROLLERS:
        manager.add(controller)
    manager.start(sync_timeout=120)
    return manager


def cleanup(client: Client, names: list[str], threads: int) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: client.delete("Node", n), names))
    wait(
        "the benchmark's flavors to go",
        lambda: [
            f["metadata"]["name"]
            for f in client.list("ResourceFlavor")[0]
            if "tesla-t4" in f["metadata"]["name"]
        ],
        [],
        300,
        0.5,
    )
    client.delete("InstanceType", POOL)
    wait(
        "the benchmark's InstanceType to go", lambda: client.get("InstanceType", POOL) is None, True, 300, 0.5
    )
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: client.delete("Devices", n), names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--threads", type=int, default=8, help="concurrent writers (default 8)")
    parser.add_argument(
        "--writers",
        type=int,
        default=1,
        help="writer processes of --threads threads each (default 1: this one)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase (default 900)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or "")
    parser.add_argument("--keep", action="store_true", help="leave nodes and objects behind")
    series.add_argument(parser)
    args = parser.parse_args(argv)

    info = harness.info()
    kubeconfig = args.kubeconfig or str(info.kubeconfig)
    info.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "charts/gpustack-operator/crds")
    )
    info.kubectl("create", "namespace", "gpustack-system", check=False)
    client = Client(load_api_client(kubeconfig), timeout=30.0)
    n = args.nodes
    names = [node_name(i) for i in range(n)]
    emit(phase="setup", nodes=n, cards_per_node=CARDS, threads=args.threads, cpus=os.cpu_count())

    started = time.monotonic()
    holder = running_worker(client)
    manager = None if holder else start_controllers(client)
    emit(
        phase="controllers",
        started_s=round(time.monotonic() - started, 3),
        source=f"the running worker {holder}" if holder else "this process",
    )
    try:
        started = time.monotonic()
        with DepthSampler(manager) as depths:
            write_inventory(client, kubeconfig, names, "build", args.threads, args.writers)
        last_write = time.monotonic()
        emit(phase="build", wrote_nodes_and_ledgers_s=round(last_write - started, 3), writers=args.writers)
        if manager is not None:
            emit(phase="build", queue_depths=depths.figures())
        want = f"{CARDS}/{CARDS * n} {CARDS}/{10 * CARDS * n} 100/{100 * CARDS * n} 0/0"
        to_status = wait(
            "the InstanceType's accelerator summary", lambda: summary(client), want, args.timeout
        )
        to_queue = wait(
            "the ClusterQueue's nominal credits", lambda: nominal(client), CARDS * n * M, args.timeout
        )
        emit(
            phase="build",
            expect=want,
            status_converged_after_last_write_s=round(to_status, 3) if to_status is not None else None,
            queue_converged_after_last_write_s=round(time.monotonic() - last_write, 3)
            if to_queue is not None
            else None,
        )
        to_keys = wait(
            "nodes carrying their counting keys",
            lambda: keyed_nodes(client, manager),
            n,
            args.timeout,
            0.1 if manager else 0.5,
        )
        emit(
            phase="build",
            node_keys_on_every_node_after_last_write_s=round(time.monotonic() - last_write, 3)
            if to_keys is not None
            else None,
        )

        started = time.monotonic()
        write_inventory(client, kubeconfig, names, "burst", args.threads, args.writers)
        last_write = time.monotonic()
        want = f"0/0 0/0 50/{50 * CARDS * n} 0/0"
        to_status = wait("the summary after the burst", lambda: summary(client), want, args.timeout)
        emit(
            phase="burst",
            ledgers_rewritten=n,
            wrote_s=round(last_write - started, 3),
            expect=want,
            status_converged_after_last_write_s=round(to_status, 3) if to_status is not None else None,
        )

        freed = ledger(names[0], 50)
        freed["status"]["groups"][0]["accelerators"][0].update(
            mode=0, allocated=0, remaining=M, allocatedSlices=0
        )
        write_status(client, freed)
        want = f"1/1 1/10 100/{50 * CARDS * n + 50} 0/0"
        to_status = wait("the summary after one card is freed", lambda: summary(client), want, args.timeout)
        emit(
            phase="single",
            expect=want,
            status_converged_after_write_s=round(to_status, 3) if to_status is not None else None,
        )
        # ru_maxrss is KiB on Linux: the peak of the controllers, their informers and this script.
        emit(phase="memory", max_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
        if manager is not None:
            emit(phase="reconciles", **reconcile_figures())
        else:
            emit(phase="reconciles", note="measured by the running worker: see its /metrics")
    finally:
        if not args.keep:
            started = time.monotonic()
            cleanup(client, names, args.threads)
            emit(phase="cleanup", s=round(time.monotonic() - started, 3))
        if manager is not None:
            manager.stop()
    series.write(args.series_out, "bench_pools", EMITTED, f"nodes{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
