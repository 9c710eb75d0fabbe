"""Benchmark of gate 3's decision: time ``controllers.nodedevices.fit.decide`` per Workload.

Run ``python -m loadtests.bench_gate3`` (after building the fastpath extensions).  The inputs are
what the controller hands the decision — cached ResourceFlavors, Nodes and ``Devices``, the bound
Pods of one uncached list, the other Workloads — built from the simulated A10G profile: 8-card
nodes, every node carrying a few Pods with allocation records (exclusive cards and slices, so the
ledger is rebuilt from records on every decision), and a few inflight Workloads.

Scenarios, each for a flavor pool of 100 and of 1,000 nodes:

- ``tas``: the Workload's PodSet is assigned one node (what every queue this operator derives
  does); the Pod list is that node's (the controller lists by ``spec.nodeName``).
- ``pool-first-fit``: no hostname assignment, the first pool node fits (every bound Pod listed).
- ``pool-retry``: no hostname assignment and no node fits — the whole pool is built and searched,
  the worst case.

Prints one JSON object per scenario with the median, p90 and max milliseconds per decision.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from api import allocation, constants
from controllers.nodedevices import fit
from nodeplugins.devicemanager import simulated as sim

A10G = sim.PRODUCTS["NVIDIA A10G"]
M = 1_600_000
CREDITS = "credits.gpustack.ai/nvidia"
FLAVOR = "gpustack--generic--nvidia-a10g-linux-amd64-8d"
INFLIGHT = 5


def _flavor() -> dict:
    labels = sim.node_labels("x", A10G, 8)
    keys = (
        constants.LABEL_OS,
        constants.LABEL_ARCH,
        constants.LABEL_MANAGED,
        constants.label_general_group("generic"),
        constants.label_accelerator_group(A10G.group),
        constants.label_accelerator_count(A10G.group),
        constants.LABEL_TOPOLOGY_PROFILE,
    )
    return {"metadata": {"name": FLAVOR}, "spec": {"nodeLabels": {k: labels[k] for k in keys}}}


def _card(node: str, i: int) -> str:
    return f"{node}-{A10G.group}-{i}"


def _pod(node: str, name: str, container: str, entries: list[dict], limits: dict) -> dict:
    record = {container: [{"id": A10G.group, "manufacturer": "nvidia", "accelerators": entries}]}
    return {
        "metadata": {
            "name": name,
            "namespace": "tenant",
            "annotations": {allocation.ANNOTATION: allocation.encode(record)},
            "labels": {},
        },
        "spec": {"nodeName": node, "containers": [{"name": container, "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


def _node_pods(node: str, *, full: bool) -> list[dict]:
    """A busy node: two exclusive cards, three cards of 40 % slices; ``full`` also takes the rest
    with exclusive and 60 % slices, so no card is whole."""
    pods = [
        _pod(
            node,
            f"{node}-ex",
            "main",
            [allocation.accelerator_entry(_card(node, i), i, 1) for i in (0, 1)],
            {"nvidia.com/gpu": "2"},
        )
    ]
    for i in (2, 3, 4):
        pods.append(
            _pod(
                node,
                f"{node}-sl{i}",
                "main",
                [allocation.accelerator_entry(_card(node, i), i, 3, 640_000, slices=1)],
                {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "640000"},
            )
        )
    if full:
        for i in (5, 6, 7):
            pods.append(
                _pod(
                    node,
                    f"{node}-sl{i}",
                    "main",
                    [allocation.accelerator_entry(_card(node, i), i, 3, 960_000, slices=1)],
                    {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "960000"},
                )
            )
    return pods


def _workload(name: str, cards: int, nodes: dict[str, int] | None, *, ready: bool = False) -> dict:
    assignment: dict[str, Any] = {"name": "main", "count": sum(nodes.values()) if nodes else 1}
    assignment["flavors"] = {"cpu": FLAVOR, CREDITS: FLAVOR}
    if nodes:
        assignment["topologyAssignment"] = {
            "levels": [constants.LABEL_HOSTNAME],
            "slices": [
                {
                    "domainCount": len(nodes),
                    "valuesPerLevel": [{"individual": {"roots": list(nodes)}}],
                    "podCounts": {"individual": list(nodes.values())},
                }
            ],
        }
    return {
        "metadata": {"name": name, "namespace": "tenant", "uid": name},
        "spec": {
            "podSets": [
                {
                    "name": "main",
                    "count": assignment["count"],
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(cards)}}}
                            ]
                        }
                    },
                }
            ]
        },
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}]
            + ([{"type": "Admitted", "status": "True"}] if ready else []),
            "admission": {"clusterQueue": "cq", "podSetAssignments": [assignment]},
            "admissionChecks": [{"name": fit.CHECK, "state": "Ready" if ready else "Pending"}],
        },
    }


def _cluster(size: int, *, full: bool) -> tuple[dict, dict, dict, list[dict], list[dict]]:
    names = [f"gpu-{i:04d}" for i in range(size)]
    nodes = {n: {"metadata": {"name": n, "labels": sim.node_labels(n, A10G, 8)}} for n in names}
    devices = {n: sim.devices(n, A10G, 8) for n in names}
    pods = [pod for n in names for pod in _node_pods(n, full=full)]
    # Inflight: admitted Workloads promised a card on the first nodes, their Pods not yet allocated.
    others = [_workload(f"inflight-{k}", 1, {names[k % size]: 1}, ready=True) for k in range(INFLIGHT)]
    others += [_workload(f"pending-{k}", 4, None) for k in range(20)]  # waiting: never charged
    return {FLAVOR: _flavor()}, nodes, devices, pods, others


def _time(fn, repeat: int) -> list[float]:
    fn()  # warm
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def bench_gate3(sizes: tuple[int, ...] = (100, 1000), repeat_override: int | None = None) -> list[dict]:
    results = []
    for size in sizes:
        repeat = repeat_override or (200 if size <= 100 else 30)
        for scenario in ("tas", "pool-first-fit", "pool-retry"):
            full = scenario == "pool-retry"
            flavors, nodes, devices, pods, others = _cluster(size, full=full)
            target = f"gpu-{size - 1:04d}"
            if scenario == "tas":
                workload = _workload("judged", 2, {target: 1})
                listed = [p for p in pods if p["spec"]["nodeName"] == target]
            else:
                workload = _workload("judged", 2 if not full else 4, None)
                listed = pods
            verdicts = []

            def run(
                workload=workload,
                listed=listed,
                flavors=flavors,
                nodes=nodes,
                devices=devices,
                others=others,
                verdicts=verdicts,
            ):
                verdicts.append(
                    fit.decide(
                        workload, flavors=flavors, nodes=nodes, devices=devices, pods=listed, others=others
                    )
                )

            samples = _time(run, repeat)
            results.append(
                {
                    "scenario": scenario,
                    "nodes": size,
                    "cards": size * 8,
                    "pods_listed": len(listed),
                    "inflight": INFLIGHT,
                    "verdict": verdicts[-1].state,
                    "median_ms": round(statistics.median(samples), 3),
                    "p90_ms": round(sorted(samples)[int(len(samples) * 0.9) - 1], 3),
                    "max_ms": round(max(samples), 3),
                    "runs": repeat,
                }
            )
    return results


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="gate 3's decision per Workload")
    parser.add_argument("--sizes", default="100,1000", help="flavor pool sizes in nodes (comma list)")
    parser.add_argument(
        "--repeat", type=int, default=0, help="decisions timed per scenario (default by size)"
    )
    from loadtests import series

    series.add_argument(parser)
    args = parser.parse_args(argv)
    sizes = tuple(int(size) for size in args.sizes.split(",") if size)
    rows = bench_gate3(sizes, args.repeat or None)
    for row in rows:
        print(json.dumps(row))
    series.write(args.series_out, "bench_gate3", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
