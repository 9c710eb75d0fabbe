"""Benchmark of gate 3's decision: time ``controllers.nodedevices.fit.decide`` per Workload.

Run ``python -m loadtests.bench_gate3`` (after building the fastpath extensions).  The inputs are
what the controller hands the decision — cached ResourceFlavors, Nodes and ``Devices``, the bound
Pods of one uncached list, the other Workloads — built from the simulated A10G profile: 8-card
nodes, every node carrying a few Pods with allocation records (exclusive cards and slices, so the
ledger is rebuilt from records when a node's Pods change), a few inflight Workloads, and the rest of
the fleet's Workloads (``--fleet-per-node``, 2 by default: Workloads reserved on a node and still
waiting for this check, which charge nothing but are looked at — the fleet grows with the pool).  Every
object carries a ``resourceVersion``, as the API server's do: the decision is timed as the
controller makes it, with the :class:`controllers.nodedevices.fit.DecisionCache` the earlier
decisions filled (``median_ms``, ``p90_ms``, ``max_ms``: nothing changed in between, so every node
is answered from the cache; ``changed_ms``: a Pod was rewritten on 1 % of the nodes before each
decision, so those are rebuilt; ``fresh_list_ms``: each decision given a freshly decoded copy of the
Pod list, as the controller's uncached list is), and cold, with an empty one (``cold_ms``: the first
decision after the worker starts, every node built).

The same decisions are timed as the controller now makes them (``informer_ms``, ``informer_p90_ms``,
``informer_cpu_ms``, ``informer_changed_ms``): :func:`controllers.nodedevices.fit.decide_confirmed`
over a Pod cache indexed by node and by Workload, as the shared Pod informer serves it, re-reading
only the nodes marked changed, with every node a ``Ready`` places Pods on read "uncached" (a freshly
decoded copy of that node's Pods, the HTTP round trip not included; ``reads`` per decision), and
the other Workloads asked of a Workload informer by the nodes the decision reads (``promises``, the
controller's node index; its inflight index for a decision over a whole pool) instead of passed whole.

Scenarios, each for a flavor pool of 100, 1,000 and 10,000 nodes (``--sizes``):

- ``tas``: the Workload's PodSet is assigned one node (what every queue this operator derives
  does); the Pod list is that node's (the controller lists by ``spec.nodeName``).
- ``pool-first-fit``: no hostname assignment, the first pool node fits (every bound Pod listed).
- ``pool-retry``: no hostname assignment and no node fits — every node of the pool is asked, the
  worst case.

Prints one JSON object per scenario with the median, p90 and max milliseconds per decision, the
median CPU milliseconds (``cpu_ms``: what the decision itself used, on a machine other work shares),
and the medians of the decisions after a change and of the cold ones.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import orjson

from api import allocation, constants
from controllers.nodedevices import fit
from controllers.nodedevices.check import workloads_on
from controllers.nodedevices.fit_labels import WORKLOAD_INDEXES
from kube.informer import Informer
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


_VERSIONS = iter(range(1000, 1 << 62))


def _version() -> str:
    """A fresh resourceVersion (etcd's revision: one per write of any object)."""
    return str(next(_VERSIONS))


def _pod(node: str, name: str, container: str, entries: list[dict], limits: dict) -> dict:
    record = {container: [{"id": A10G.group, "manufacturer": "nvidia", "accelerators": entries}]}
    return {
        "metadata": {
            "name": name,
            "namespace": "tenant",
            "uid": f"uid-{name}",
            "resourceVersion": _version(),
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


def _cluster(size: int, *, full: bool, fleet: int = 0) -> tuple[dict, dict, dict, list[dict], list[dict]]:
    names = [f"gpu-{i:05d}" for i in range(size)]
    nodes = {
        n: {"metadata": {"name": n, "resourceVersion": _version(), "labels": sim.node_labels(n, A10G, 8)}}
        for n in names
    }
    devices = {n: sim.devices(n, A10G, 8) for n in names}
    for obj in devices.values():
        obj["metadata"]["resourceVersion"] = _version()
    pods = [pod for n in names for pod in _node_pods(n, full=full)]
    # Inflight: admitted Workloads promised a card on the first nodes, their Pods not yet allocated.
    others = [_workload(f"inflight-{k}", 1, {names[k % size]: 1}, ready=True) for k in range(INFLIGHT)]
    others += [_workload(f"pending-{k}", 4, None) for k in range(20)]  # waiting: never charged
    # The rest of the fleet: reserved on a node, waiting for this check (looked at, never charged).
    others += [_workload(f"fleet-{k}", 1, {names[k % size]: 1}) for k in range(fleet)]
    for obj in others:
        obj["metadata"]["resourceVersion"] = _version()
    return {FLAVOR: _flavor()}, nodes, devices, pods, others


def _time(fn, repeat: int, cpu: list[float] | None = None) -> list[float]:
    """Wall milliseconds per call (``cpu``: the process's CPU milliseconds appended too)."""
    fn()  # warm
    samples = []
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - used) * 1000)
    return samples


def _churn(listed: list[dict], count: int, step: int) -> list[tuple[dict, dict]]:
    """Rewrite ``count`` Pods of ``listed`` (a new resourceVersion, as any write gives), on as many
    nodes: their ledgers are rebuilt by the next decision.  Returns each (old, new) pair."""
    stride = max(1, len(listed) // count)
    rewritten = []
    for k in range(count):
        at = (step * 7 + k * stride) % len(listed)
        old = listed[at]
        pod = dict(old)
        pod["metadata"] = {**old["metadata"], "resourceVersion": _version()}
        listed[at] = pod
        rewritten.append((old, pod))
    return rewritten


class _Informer:
    """The shared Pod informer's two indexes over the benchmark's Pods."""

    def __init__(self, pods: list[dict]) -> None:
        self.by_node: dict[str, list[dict]] = {}
        self.by_workload: dict[str, list[dict]] = {}  # as the informer's index: <namespace>/<name>
        for pod in pods:
            self.put(pod)

    def put(self, pod: dict, old: dict | None = None) -> None:
        """Store ``pod`` (replacing ``old``) in both indexes, as the informer's event does."""
        for index, key in (
            (self.by_node, pod["spec"]["nodeName"]),
            *((self.by_workload, w) for w in fit.pod_workload(pod)),
        ):
            listed = index.setdefault(key, [])
            if old is not None:
                listed[:] = [p for p in listed if p is not old]
            listed.append(pod)

    def node_pods(self, node: str) -> list[dict]:
        return self.by_node.get(node, [])

    def workload_pods(self, namespace: str, name: str) -> list[dict]:
        return self.by_workload.get(f"{namespace}/{name}", [])


def _informer_run(workload, flavors, nodes, devices, listed, others, assigned, repeat, size, verdicts):
    """Time :func:`fit.decide_confirmed` as the controller calls it (see the module's docstring)."""
    informer = _Informer(listed)
    blobs = {node: orjson.dumps(pods) for node, pods in informer.by_node.items()}
    reads: list[str] = []

    def read_node(node: str) -> list[dict]:
        reads.append(node)
        return orjson.loads(blobs.get(node, b"[]"))

    def read_all() -> list[dict]:
        reads.append("*")
        return orjson.loads(orjson.dumps([p for pods in informer.by_node.values() for p in pods]))

    cache = fit.DecisionCache()
    changed: set[str] = set()
    workloads = Informer(None, "Workload", indexes=WORKLOAD_INDEXES)  # type: ignore[arg-type]
    for obj in others:
        workloads._store("ADDED", obj)

    def promises(near):
        return workloads_on(workloads, near)

    def run() -> None:
        nonlocal changed
        fresh = {node: read_node(node) for node in assigned}
        verdict, reread = fit.decide_confirmed(
            workload,
            source=informer,
            changed=changed,
            read_node=read_node,
            read_all=read_all,
            cache=cache,
            fresh=fresh,
            flavors=flavors,
            nodes=nodes,
            devices=devices,
            promises=promises,
        )
        changed = set(reread)
        verdicts.append(verdict)

    cpu: list[float] = []
    samples = _time(run, repeat, cpu)
    changed_samples = []
    for step in range(repeat):  # a Pod rewritten on 1 % of the nodes, its node marked by its event
        for old, pod in _churn(listed, max(1, size // 100), step):
            informer.put(pod, old)
            changed.add(pod["spec"]["nodeName"])
        started = time.perf_counter()
        run()
        changed_samples.append((time.perf_counter() - started) * 1000)
    reads.clear()
    run()
    per_decision = len(reads)
    return {
        "informer_ms": round(statistics.median(samples), 3),
        "informer_p90_ms": round(sorted(samples)[int(len(samples) * 0.9) - 1], 3),
        "informer_cpu_ms": round(statistics.median(cpu), 3),
        "informer_changed_ms": round(statistics.median(changed_samples), 3),
        "reads": per_decision,
    }


def bench_gate3(
    sizes: tuple[int, ...] = (100, 1000, 10000), repeat_override: int | None = None, fleet_per_node: int = 2
) -> list[dict]:
    results = []
    for size in sizes:
        repeat = repeat_override or (200 if size <= 100 else 30)
        cold_repeat = repeat_override or (5 if size <= 1000 else 2)
        for scenario in ("tas", "pool-first-fit", "pool-retry"):
            full = scenario == "pool-retry"
            flavors, nodes, devices, pods, others = _cluster(size, full=full, fleet=fleet_per_node * size)
            target = f"gpu-{size - 1:05d}"
            if scenario == "tas":
                workload = _workload("judged", 2, {target: 1})
                listed = [p for p in pods if p["spec"]["nodeName"] == target]
            else:
                workload = _workload("judged", 2 if not full else 4, None)
                listed = pods
            verdicts: list[fit.Verdict] = []
            cache = fit.DecisionCache()

            def run(
                workload=workload,
                listed=listed,
                flavors=flavors,
                nodes=nodes,
                devices=devices,
                others=others,
                verdicts=verdicts,
                cache=cache,
            ):
                verdicts.append(
                    fit.decide(
                        workload,
                        flavors=flavors,
                        nodes=nodes,
                        devices=devices,
                        pods=listed,
                        others=others,
                        cache=cache,
                    )
                )

            def cold(run=run, cache=cache):
                cache.clear()  # the first decision after a start
                run()

            cold_samples = _time(cold, cold_repeat)
            cpu: list[float] = []
            samples = _time(run, repeat, cpu)
            changed_samples = []
            for step in range(repeat):  # a Pod rewritten on 1 % of the nodes before each decision
                _churn(listed, max(1, size // 100), step)
                started = time.perf_counter()
                run()
                changed_samples.append((time.perf_counter() - started) * 1000)
            # The controller's Pod list is decoded afresh for every decision: new objects, the same
            # resourceVersions (the cache compares those, never identities).
            blob = orjson.dumps(listed)
            fresh_samples = []
            for _ in range(min(repeat, 5)):
                fresh = orjson.loads(blob)
                started = time.perf_counter()
                run(listed=fresh)
                fresh_samples.append((time.perf_counter() - started) * 1000)
            informed: list[fit.Verdict] = []
            assigned = [target] if scenario == "tas" else []
            figures = _informer_run(
                workload, flavors, nodes, devices, listed, others, assigned, repeat, size, informed
            )
            if len(set(verdicts)) != 1 or set(informed) != set(verdicts):
                raise SystemExit(f"{scenario} at {size} nodes: the verdict changed between decisions")
            results.append(
                {
                    **figures,
                    "scenario": scenario,
                    "nodes": size,
                    "cards": size * 8,
                    "pods_listed": len(listed),
                    "inflight": INFLIGHT,
                    "workloads": len(others),
                    "verdict": verdicts[-1].state,
                    "median_ms": round(statistics.median(samples), 3),
                    "p90_ms": round(sorted(samples)[int(len(samples) * 0.9) - 1], 3),
                    "max_ms": round(max(samples), 3),
                    "runs": repeat,
                    "cpu_ms": round(statistics.median(cpu), 3),
                    "changed_ms": round(statistics.median(changed_samples), 3),
                    "fresh_list_ms": round(statistics.median(fresh_samples), 3),
                    "cold_ms": round(statistics.median(cold_samples), 3),
                    "cold_runs": cold_repeat,
                }
            )
    return results


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="gate 3's decision per Workload")
    parser.add_argument("--sizes", default="100,1000,10000", help="flavor pool sizes in nodes (comma list)")
    parser.add_argument(
        "--repeat", type=int, default=0, help="decisions timed per scenario (default by size)"
    )
    parser.add_argument(
        "--fleet-per-node", type=int, default=2, help="other Workloads per pool node, waiting (default 2)"
    )
    from loadtests import series

    series.add_argument(parser)
    args = parser.parse_args(argv)
    sizes = tuple(int(size) for size in args.sizes.split(",") if size)
    rows = bench_gate3(sizes, args.repeat or None, args.fleet_per_node)
    for row in rows:
        print(json.dumps(row))
    series.write(args.series_out, "bench_gate3", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
