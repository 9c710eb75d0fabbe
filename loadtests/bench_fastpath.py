"""Benchmark of the admission hot paths: each compiled extension against its interpreted source.

Run ``python -m loadtests.bench_fastpath`` from the repository root after building the extensions
(``pip install -e .``, or ``python setup.py build_ext --inplace``).
Each ``bench_*()`` measures the same realistic inputs both ways (``timeit``, best of several repeats)
and returns ``{"compiled_s", "interpreted_s", "speedup"}``, seconds per round:

- ``bench_quantity`` — the resource values of a few accelerator Pods, parsed exactly and read as
  whole numbers;
- ``bench_requests`` — gate 1's one pass over four Pod shapes (slice with SSH and metrics sidecars
  and an init container, multi-container whole cards, a MIG partition, shared cards with RDMA),
  plus each Pod's demand;
- ``bench_fit`` — a gate-3 round on two pools (an A10G pool of 8 nodes × 8 cards in mixed modes and
  an H100 MIG pool of 2 nodes × 7 cards): rebuild each node's ledger from its ``Devices``, judge five
  demands per node, place them in sequence on a copy (inflight accounting), then the four views and
  every node's fit labels.
"""

from __future__ import annotations

import json
import random
import sys
import timeit
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fastpath import quantity, requests
from fastpath.pure import bundle, is_compiled, load, modules

M = 1_600_000
REPEATS = 7
SECONDS_PER_REPEAT = 0.2


def configure(repeats: int, seconds: float) -> None:
    """How long each measurement runs: ``repeats`` repeats of about ``seconds`` each (best taken)."""
    global REPEATS, SECONDS_PER_REPEAT
    REPEATS, SECONDS_PER_REPEAT = repeats, seconds


# The Devices ledger: its classes, building, placement, views and fit labels.
LEDGER = ("cards", "ledger", "fit", "views", "fit_labels")

# --- Inputs ----------------------------------------------------------------------------------------------

QUANTITIES = [
    "1", "50", "100", "16384", "6144", "8", "500m", "64Gi", "2Gi", "128Mi", "100Gi", "1.5", "250m",
    "480000", "800k", "1e3", 1, 2, 40, "24576Mi",
]  # fmt: skip


def _container(
    name: str, limits: dict[str, Any], requests_: dict[str, Any] | None = None, **extra: Any
) -> dict:
    resources: dict[str, Any] = {"limits": limits}
    if requests_ is not None:
        resources["requests"] = requests_
    return {"name": name, "image": "registry.example.com/team/app:1.2.3", "resources": resources, **extra}


PODS: list[dict[str, Any]] = [
    {
        "initContainers": [
            _container("fetch-weights", {"cpu": "2", "memory": "4Gi"}, {"cpu": "500m", "memory": "1Gi"}),
            _container("log-shipper", {"cpu": "200m", "memory": "256Mi"}, restartPolicy="Always"),
        ],
        "containers": [
            _container(
                "engine",
                {
                    "cpu": "8",
                    "memory": "64Gi",
                    "ephemeral-storage": "100Gi",
                    "nvidia.com/gpu.sliced": "1",
                    "nvidia.com/gpu.sliced.memory-percentage": "50",
                    "nvidia.com/gpu.sliced.cores-percentage": "40",
                    "nvidia.com/gpu.sliced.units": "800000",
                    "device.gpustack.ai/rdma.shared": "1",
                },
                {"cpu": "800m", "memory": "8Gi", "nvidia.com/gpu.sliced": "1"},
            ),
            _container(
                "sshd", {"cpu": "100m", "memory": "128Mi", "device.gpustack.ai/nvidia.visibility": "1"}
            ),
            _container("metrics", {"cpu": "100m", "memory": "64Mi"}),
        ],
    },
    {
        "containers": [
            _container(
                "trainer",
                {"cpu": "32", "memory": "256Gi", "amd.com/gpu": "4"},
                {"cpu": "16", "memory": "128Gi"},
            ),
            _container("evaluator", {"cpu": "4", "memory": "32Gi", "amd.com/gpu": "1"}),
        ]
    },
    {
        "containers": [
            _container(
                "engine",
                {
                    "cpu": "12",
                    "memory": "128Gi",
                    "nvidia.com/gpu.partitioned": "1",
                    "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                    "nvidia.com/gpu.partitioned.units": "785000",
                },
            )
        ]
    },
    {
        "initContainers": [_container("migrate", {"cpu": "1", "memory": "1Gi"})],
        "containers": [
            _container(
                "worker",
                {"cpu": "4", "memory": "16Gi", "huawei.com/npu.shared": 2, "device.gpustack.ai/rdma": "1"},
                {"cpu": "4", "memory": "16Gi"},
            ),
            _container("sidecar", {"cpu": "250m", "memory": "256Mi"}),
        ],
    },
]

_H100 = [
    ("1g.10gb", 9856, [(s, 1) for s in range(7)]),
    ("1g.20gb", 19968, [(s, 2) for s in (0, 2, 4, 6)]),
    ("2g.20gb", 19968, [(s, 2) for s in (0, 2, 4)]),
    ("3g.40gb", 40192, [(0, 4), (4, 4)]),
    ("4g.40gb", 40192, [(0, 4)]),
    ("7g.80gb", 80768, [(0, 8)]),
]


def _devices(node: str, group: str, cards: int, rows: list[dict], *, partitioned: bool = False) -> dict:
    accelerators = []
    for i in range(cards):
        status: dict[str, Any] = {
            "unhealthy": False,
            "logicalSliced": {"coresPercentageOvercommit": True, "count": 0 if partitioned else 128},
        }
        if partitioned:
            status["physicalSliced"] = {
                "count": 7,
                "profiles": [
                    {
                        "name": n,
                        "memoryMib": mib,
                        "count": len(p),
                        "placements": [{"start": s, "length": ln} for s, ln in p],
                    }
                    for n, mib, p in _H100
                ],
            }
        accelerators.append(
            {
                "id": f"GPU-{node}-{i}",
                "index": i,
                "physicalIndexes": [i],
                "topology": {"pciBusId": f"0000:{i:02x}:00.0"},
                "status": status,
            }
        )
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Devices",
        "metadata": {
            "name": node,
            "labels": {f"acceleratable.feature.gpustack.ai/{group}": "true", "gpustack.ai/managed": "true"},
        },
        "spec": {
            "groups": [
                {
                    "id": group,
                    "manufacturer": "nvidia",
                    "name": group,
                    "memory": 24576,
                    "accelerators": accelerators,
                }
            ]
        },
        "status": {"groups": [{"id": group, "manufacturer": "nvidia", "accelerators": rows}]},
    }


def _a10g_pool() -> list[dict]:
    rng = random.Random(20260)
    pool = []
    for n in range(8):
        rows = []
        for i in range(8):
            card = f"GPU-node-{n}-{i}"
            kind = rng.choice(["free", "free", "exclusive", "shared", "sliced", "sliced-full", "none"])
            if kind == "free":
                rows.append({"id": card, "index": i, "mode": 0, "remaining": M})
            elif kind == "exclusive":
                rows.append({"id": card, "index": i, "mode": 1, "allocated": M})
            elif kind == "shared":
                holders = rng.randint(1, 9)
                rows.append(
                    {
                        "id": card,
                        "index": i,
                        "mode": 2,
                        "allocated": holders * 160_000,
                        "remaining": M - holders * 160_000,
                    }
                )
            elif kind == "sliced":
                used = rng.choice([320_000, 480_000, 800_000, 1_120_000])
                rows.append(
                    {
                        "id": card,
                        "index": i,
                        "mode": 3,
                        "allocated": used,
                        "remaining": M - used,
                        "allocatedSlices": rng.randint(1, 3),
                    }
                )
            elif kind == "sliced-full":
                rows.append(
                    {
                        "id": card,
                        "index": i,
                        "mode": 3,
                        "allocated": 1_440_000,
                        "remaining": 160_000,
                        "allocatedSlices": 3,
                    }
                )
        pool.append(_devices(f"node-{n}", "nvidia-a10g", 8, rows))
    return pool


def _h100_pool() -> list[dict]:
    pool = []
    for n in range(2):
        rows = [
            {"id": f"GPU-mig-{n}-0", "index": 0, "mode": 4, "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
             "remainingProfiles": [{"name": "1g.10gb", "count": 3}, {"name": "1g.20gb", "count": 2}, {"name": "2g.20gb", "count": 1},
                                   {"name": "3g.40gb", "count": 1}, {"name": "4g.40gb"}, {"name": "7g.80gb"}]},
            {"id": f"GPU-mig-{n}-1", "index": 1, "mode": 4, "allocatedProfiles": [{"name": "1g.10gb", "count": 2}]},
        ]  # fmt: skip
        pool.append(_devices(f"mig-{n}", "nvidia-h100-80gb-hbm3", 7, rows, partitioned=True))
    return pool


A10G_POOL = _a10g_pool()
H100_POOL = _h100_pool()
CORES = {**{f"node-{n}": 64 for n in range(8)}, **{f"mig-{n}": 96 for n in range(2)}}


def _a10g_demands(d: Callable[..., Any]) -> list:
    return [
        d("sliced", "nvidia", "nvidia.com/gpu", 1, 480_000, ""),
        d("sliced", "nvidia", "nvidia.com/gpu", 1, 960_000, ""),
        d("shared", "nvidia", "nvidia.com/gpu", 2, 160_000, ""),
        d("exclusive", "nvidia", "nvidia.com/gpu", 2, M, ""),
        d("sliced", "nvidia", "nvidia.com/gpu", 2, 640_000, ""),
    ]


def _h100_demands(d: Callable[..., Any]) -> list:
    return [
        d("partitioned", "nvidia", "nvidia.com/gpu", 1, 785_000, "3g.40gb"),
        d("partitioned", "nvidia", "nvidia.com/gpu", 1, 195_000, "1g.10gb"),
        d("partitioned", "nvidia", "nvidia.com/gpu", 2, 390_000, "2g.20gb"),
        d("partitioned", "nvidia", "nvidia.com/gpu", 1, M, "7g.80gb"),
        d("partitioned", "nvidia", "nvidia.com/gpu", 1, 390_000, "1g.20gb"),
    ]


# --- Rounds ----------------------------------------------------------------------------------------------


def _quantity_round(q: ModuleType) -> Callable[[], None]:
    parse, whole = q.parse, q.whole

    def round_() -> None:
        for value in QUANTITIES:
            parse(value)
            whole(value)

    return round_


def _requests_round(r: ModuleType) -> Callable[[], None]:
    scan = r.scan_pod

    def round_() -> None:
        for spec in PODS:
            scan(spec).demand()

    return round_


def _fit_round(f: Any) -> Callable[[], None]:
    pools = [
        (A10G_POOL, "nvidia-a10g", _a10g_demands(f.Demand)),
        (H100_POOL, "nvidia-h100-80gb-hbm3", _h100_demands(f.Demand)),
    ]

    def round_() -> None:
        for objs, group, demands in pools:
            nodes = []
            for obj in objs:
                node = f.node_ledger(obj, group)
                node.cores = CORES[node.name]
                nodes.append(node)
                for demand in demands:
                    f.fits(node, demand)
                f.place_many(node.copy(), demands)
                f.fit_labels(node)
            f.views(f.Ledger(nodes))

    return round_


def _measure(
    make: Callable[[Any], Callable[[], None]],
    compiled: Any,
    interpreted: Any,
    built: list[ModuleType] | None = None,
) -> dict[str, float]:
    for module in built or [compiled]:
        if not is_compiled(module):
            raise SystemExit(
                f"{module.__name__} is not compiled ({module.__file__}): build the extensions first "
                "(pip install -e . or python setup.py build_ext --inplace)"
            )
    figures = {}
    for label, module in (("compiled_s", compiled), ("interpreted_s", interpreted)):
        round_ = make(module)
        round_()  # warm up
        number, elapsed = timeit.Timer(round_).autorange()
        number = max(1, int(number * SECONDS_PER_REPEAT / max(elapsed, 1e-9)))  # seconds per repeat
        figures[label] = min(timeit.repeat(round_, number=number, repeat=REPEATS)) / number
    figures["speedup"] = figures["interpreted_s"] / figures["compiled_s"]
    return figures


def bench_quantity() -> dict[str, float]:
    return _measure(_quantity_round, quantity, load("quantity"))


def bench_requests() -> dict[str, float]:
    return _measure(_requests_round, requests, load("requests"))


def bench_fit() -> dict[str, float]:
    return _measure(_fit_round, bundle(LEDGER), bundle(LEDGER, interpreted=True), modules(LEDGER))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="repeats per measurement, best taken")
    parser.add_argument("--seconds", type=float, default=SECONDS_PER_REPEAT, help="seconds per repeat")
    parser.add_argument(
        "--json", action="store_true", help="(kept for scripts; the JSON line is always printed)"
    )
    from loadtests import series

    series.add_argument(parser)
    args = parser.parse_args(argv)
    configure(args.repeats, args.seconds)
    results = {"quantity": bench_quantity(), "requests": bench_requests(), "fit": bench_fit()}
    for name, figures in results.items():
        print(
            f"{name:9s} compiled {figures['compiled_s'] * 1e6:9.2f} µs  interpreted {figures['interpreted_s'] * 1e6:9.2f} µs"
            f"  speedup {figures['speedup']:5.1f}×"
        )
    print(json.dumps(results))
    series.write(args.series_out, "bench_fastpath", [results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
