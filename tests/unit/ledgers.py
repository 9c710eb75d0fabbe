"""Devices ledgers for the fastpath ledger tests (test_fit, test_views): one card, one group; and
the ledger's modules read as one namespace, compiled or interpreted."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

from fastpath import pure

# The Devices ledger's fastpath modules: its classes, its building, placement and projections.
LEDGER_MODULES = ("cards", "ledger", "fit", "views", "fit_labels")

M = 1_600_000
T4 = "nvidia-tesla-t4"
H100 = "nvidia-h100-80gb-hbm3"

# NVIDIA H100 80GB MIG geometry: 8 memory slices.
H100_PROFILES = [
    {
        "name": "1g.10gb",
        "memoryMib": 9856,
        "count": 7,
        "placements": [{"start": s, "length": 1} for s in range(7)],
    },
    {
        "name": "1g.20gb",
        "memoryMib": 19968,
        "count": 4,
        "placements": [{"start": s, "length": 2} for s in (0, 2, 4, 6)],
    },
    {
        "name": "2g.20gb",
        "memoryMib": 19968,
        "count": 3,
        "placements": [{"start": s, "length": 2} for s in (0, 2, 4)],
    },
    {
        "name": "3g.40gb",
        "memoryMib": 40192,
        "count": 2,
        "placements": [{"start": s, "length": 4} for s in (0, 4)],
    },
    {"name": "4g.40gb", "memoryMib": 40192, "count": 1, "placements": [{"start": 0, "length": 4}]},
    {"name": "7g.80gb", "memoryMib": 80768, "count": 1, "placements": [{"start": 0, "length": 8}]},
]


# The same geometry plus a variant that cannot be a key segment (excluded from inventory).
H100_PROFILES_WITH_ME = [
    *H100_PROFILES,
    {"name": "1g.10gb+me", "memoryMib": 9856, "count": 1, "placements": [{"start": 0, "length": 1}]},
]


def accelerator(i: int, slices: int = 128, profiles: list | None = None, unhealthy: bool = False) -> dict:
    status: dict = {"unhealthy": unhealthy, "logicalSliced": {"count": 0 if profiles else slices}}
    if profiles:
        status["physicalSliced"] = {"count": max(p["count"] for p in profiles), "profiles": profiles}
    return {"id": f"GPU-{i}", "index": i, "physicalIndexes": [i], "status": status}


def devices(
    node: str,
    group: str,
    accelerators: list,
    rows: list | None = None,
    *,
    manufacturer: str = "nvidia",
    group_id: str | None = None,
    memory: int = 15360,
) -> dict:
    gid = group_id or group
    obj = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Devices",
        "metadata": {"name": node, "labels": {f"acceleratable.feature.gpustack.ai/{group}": "true"}},
        "spec": {
            "groups": [
                {
                    "id": gid,
                    "manufacturer": manufacturer,
                    "name": group,
                    "memory": memory,
                    "accelerators": accelerators,
                }
            ]
        },
    }
    if rows is not None:
        obj["status"] = {"groups": [{"id": gid, "manufacturer": manufacturer, "accelerators": rows}]}
    return obj


def row(i: int, mode: int, remaining: int | None = None, slices: int = 0, **extra) -> dict:
    entry = {"id": f"GPU-{i}", "index": i, "mode": mode, **extra}
    if remaining is not None:
        entry["remaining"] = remaining
    if slices:
        entry["allocatedSlices"] = slices
    return entry


def ledger_modules(interpreted: bool = False) -> list[ModuleType]:
    """The ledger's modules: compiled, or their interpreted twins (``fastpath.pure``)."""
    return pure.modules(LEDGER_MODULES, interpreted=interpreted)


def ledger_twin(interpreted: bool = False) -> SimpleNamespace:
    """The ledger's modules as one namespace, so that one test drives the compiled modules and
    their interpreted twins alike (``f.node_ledger``, ``f.place``, ``f.views``)."""
    return pure.bundle(LEDGER_MODULES, interpreted=interpreted)
