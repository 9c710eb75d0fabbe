"""Benchmark of the worker-gateway's fleet view: how fast InstanceType status updates fold.

    python -m loadtests.bench_gateway                     # 100 clusters x 20 InstanceTypes, 10,000 updates
    python -m loadtests.bench_gateway --clusters 3 --types 2 --updates 50

Every cluster serves the same ``--types`` pools (so each fleet item has one candidate per cluster,
the gateway's worst case: a change re-folds a tier of ``--clusters`` candidates).  The snapshot is
folded once (``load_ms``), then a seeded stream of ``--updates`` status updates is applied to one
fleet as an aggregated watch applies it: most change what remains, one in ten moves a candidate to
another tier (its largest free bundle changes), one in fifty flips its phase.  Two passes over the
same stream: ``fold`` applies the updates and renders each delta as a dict; ``watch`` renders each
as the NDJSON line a watcher is sent.  Rates are per second of wall time and per second of this
process's CPU time (the one-core figure when the machine is shared).  Prints one JSON line; asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence

import orjson

from api.objects import Obj
from gateway.fleet import MODIFIED, Fleet

CARDS = 8


def _spec(index: int) -> Obj:
    if index % 5 == 4:  # one pool in five is CPU-only
        return {
            "generalGroup": "generic",
            "acceleratable": False,
            "os": "linux",
            "arch": "amd64" if index % 2 else "arm64",
            "unitResources": {"cpu": "1", "ram": f"{2 + index}Gi"},
            "localStorage": "100Gi",
        }
    return {
        "generalGroup": "generic",
        "acceleratorGroup": f"nvidia-model-{index}",
        "acceleratable": True,
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "12", "ram": "128Gi"},
        "localStorage": "100Gi",
    }


def _view(once: int, remaining: int, capacity: int) -> Obj:
    return {"onceMaxRequest": str(once), "remaining": str(remaining), "capacity": str(capacity)}


def _status(once: int, free: int, phase: str, partitioned: bool) -> Obj:
    profiles = [{"name": "1g.10gb", "count": free * 7}, {"name": "7g.80gb", "count": free}]
    pt = _view(1 if free else 0, free * 7, CARDS * 7) if partitioned else _view(0, 0, 0)
    if partitioned:
        pt["remainingProfiles"] = profiles
    return {
        "phase": phase,
        "entrance": "queue",
        "detail": {
            "manufacturer": "nvidia",
            "product": "NVIDIA H100 80GB HBM3",
            "slicedDetail": {"logical": {"count": 80}, "physical": {"count": 56}},
        },
        "accelerator": _view(once, free, CARDS),
        "acceleratorShared": _view(free, free * 10, CARDS * 10),
        "acceleratorSliced": _view(100 if free else 0, free * 100, CARDS * 100),
        "acceleratorPartitioned": pt,
        "cpu": _view(96, 96 * free // CARDS, 192),
    }


def instance_type(name: str, spec: Obj, once: int, free: int, phase: str = "Active") -> Obj:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": spec,
        "status": _status(once, free, phase, partitioned=spec["acceleratable"] and name.endswith("3")),
    }


def snapshot(clusters: int, types: int) -> list[tuple[str, Obj]]:
    specs = [_spec(i) for i in range(types)]
    return [
        (f"cluster-{c:03d}", instance_type(f"type-{t}", specs[t], CARDS, CARDS * 4))
        for c in range(clusters)
        for t in range(types)
    ]


def updates(clusters: int, types: int, count: int, seed: int) -> list[tuple[str, str, Obj]]:
    """A seeded stream: (event type, cluster, object)."""
    rng = random.Random(seed)
    specs = [_spec(i) for i in range(types)]
    stream = []
    for _ in range(count):
        c, t = rng.randrange(clusters), rng.randrange(types)
        roll = rng.random()
        once = rng.randrange(1, CARDS + 1) if roll < 0.1 else CARDS  # a node's largest free bundle
        free = rng.randrange(once, CARDS * 4 + 1)  # over the cluster's four nodes
        phase = "Inactive" if roll > 0.98 else "Active"
        stream.append((MODIFIED, f"cluster-{c:03d}", instance_type(f"type-{t}", specs[t], once, free, phase)))
    return stream


def _rate(count: int, seconds: float) -> int | None:
    return round(count / seconds) if seconds > 0 else None


def measure(clusters: int, types: int, count: int, seed: int) -> Obj:
    base = snapshot(clusters, types)
    stream = updates(clusters, types, count, seed)
    started = time.perf_counter()
    Fleet().load(base)
    load_s = time.perf_counter() - started

    fleet = Fleet().load(base)
    deltas = 0
    started, cpu = time.perf_counter(), time.process_time()
    for event_type, cluster, obj in stream:
        deltas += len(fleet.apply(event_type, cluster, obj))
    fold_s, fold_cpu = time.perf_counter() - started, time.process_time() - cpu

    fleet = Fleet(encoded=True).load(base)
    encoded = 0
    dumps = orjson.dumps
    started, cpu = time.perf_counter(), time.process_time()
    for event_type, cluster, obj in stream:
        for kind, item in fleet.apply(event_type, cluster, obj):
            line = b"".join(
                (b'{"type":', dumps(kind), b',"cluster":', dumps(cluster), b',"object":', item, b"}\n")
            )
            encoded += len(line)
    watch_s, watch_cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "bench": "gateway_fleet",
        "clusters": clusters,
        "instance_types": types,
        "items": len(fleet),
        "updates": count,
        "deltas": deltas,
        "load_ms": round(load_s * 1000, 2),
        "fold_updates_per_s": _rate(count, fold_s),
        "fold_updates_per_cpu_s": _rate(count, fold_cpu),
        "watch_updates_per_s": _rate(count, watch_s),
        "watch_updates_per_cpu_s": _rate(count, watch_cpu),
        "watch_mib_encoded": round(encoded / 2**20, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--types", type=int, default=20, help="InstanceTypes per cluster (pools)")
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.clusters, args.types, args.updates, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
