"""The worker's state gauges (controllers/metrics.py): exact samples and labels from cached objects."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from api.naming import local_queue_name
from controllers import metrics


def view(once: str, remaining: str, capacity: str) -> dict[str, str]:
    return {"onceMaxRequest": once, "remaining": remaining, "capacity": capacity}


INSTANCE_TYPE = {
    "kind": "InstanceType",
    "metadata": {"name": "a10g"},
    "status": {
        "phase": "Active",
        "accelerator": view("1", "0", "2"),
        "acceleratorShared": view("2", "7", "27"),
        "acceleratorSliced": view("100", "150", "270"),
        "acceleratorPartitioned": {**view("0", "0", "0"), "remainingProfiles": []},
        "cpu": view("48", "1500m", "72"),
    },
}
EMPTY_TYPE = {"kind": "InstanceType", "metadata": {"name": "fresh"}}  # no status yet


def workload(name: str, queue: str, *conditions: str, active: bool = True) -> dict[str, Any]:
    return {
        "kind": "Workload",
        "metadata": {"namespace": "team-a", "name": name},
        "spec": {"queueName": queue, **({} if active else {"active": False})},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


WORKLOADS = [
    workload("waiting-1", local_queue_name("a10g")),
    workload("waiting-2", local_queue_name("a10g"), "Evicted"),
    workload("admitted", local_queue_name("a10g"), "QuotaReserved", "Admitted"),
    workload("finished", local_queue_name("a10g"), "Finished"),
    workload("deactivated", local_queue_name("a10g"), active=False),
    workload("elsewhere", "someone-elses-queue"),
]

DEVICES = {
    "kind": "Devices",
    "metadata": {"name": "node-1"},
    "spec": {
        "groups": [
            {
                "id": "g",
                "manufacturer": "nvidia",
                "accelerators": [{"id": f"GPU-{i}", "status": {"unhealthy": i == 3}} for i in range(5)],
            }
        ]
    },
    "status": {
        "groups": [
            {
                "id": "g",
                "manufacturer": "nvidia",
                "accelerators": [
                    {"id": "GPU-0", "index": 0, "mode": 1},
                    {"id": "GPU-1", "index": 1, "mode": 2},
                    {"id": "GPU-2", "index": 2, "mode": 0},
                    {"id": "GPU-4", "index": 4, "mode": 4},
                ],
            }
        ]
    },
}

DEPLOYMENT = {
    "kind": "ModelDeployment",
    "metadata": {"namespace": "team-a", "name": "qwen"},
    "spec": {"roles": [{"name": "prefill", "replicas": 3}, {"name": "decode"}]},
    "status": {"phase": "Degraded", "roles": [{"name": "prefill", "ready": 2, "desired": 3}]},
}
NEW_DEPLOYMENT = {
    "kind": "ModelDeployment",
    "metadata": {"namespace": "team-b", "name": "llama"},
    "spec": {"roles": [{"name": "server", "replicas": 1}]},
}

INSTANCES = [
    {"kind": "Instance", "metadata": {"namespace": "team-a", "name": "dev"}, "status": {"phase": "Ready"}},
    {
        "kind": "Instance",
        "metadata": {"namespace": "team-a", "name": "crashing"},
        "status": {"phase": "CrashLoopBackOff"},
    },
]

ARTIFACTS = [
    {
        "kind": "ModelArtifact",
        "metadata": {"namespace": "team-a", "name": "qwen"},
        "status": {"nodes": {"ready": 1, "downloading": 2, "failed": 0, "downloadingPercent": 40}},
    },
    {"kind": "ModelArtifact", "metadata": {"namespace": "team-a", "name": "new"}},
]

POOL = {
    "kind": "KVCachePool",
    "metadata": {"name": "shared"},
    "spec": {"quota": {"total": "64Gi"}},
    "status": {"usage": {"total": "16Gi"}},
}
UNREPORTED_POOL = {"kind": "KVCachePool", "metadata": {"name": "quiet"}, "spec": {"quota": {"total": "1Gi"}}}
BACKEND = {
    "kind": "KVCacheBackend",
    "metadata": {"name": "mooncake"},
    "status": {"capacity": {"total": "128Gi", "used": "1Gi"}},
}

OBJECTS: dict[str, list[dict[str, Any]]] = {
    "InstanceType": [INSTANCE_TYPE, EMPTY_TYPE],
    "Workload": WORKLOADS,
    "Devices": [DEVICES],
    "ModelDeployment": [DEPLOYMENT, NEW_DEPLOYMENT],
    "Instance": INSTANCES,
    "ModelArtifact": ARTIFACTS,
    "KVCachePool": [POOL, UNREPORTED_POOL],
    "KVCacheBackend": [BACKEND],
}
GI = float(1 << 30)


def samples(objects: dict[str, list[dict[str, Any]]] = OBJECTS) -> dict[str, dict[tuple, float]]:
    """name → {label values (sorted by label name): value}."""
    found: dict[str, dict[tuple, float]] = {}
    for family in metrics.families(lambda kind: objects.get(kind, [])):
        rows = found.setdefault(family.name, {})
        for sample in family.samples:
            assert sample.name == family.name
            assert tuple(sample.labels) == metrics.CATALOG[family.name][1]  # exactly the documented labels
            rows[tuple(sample.labels.values())] = sample.value
    return found


def test_every_family_is_in_the_catalog_and_yielded_even_when_empty() -> None:
    empty = samples({})
    assert set(empty) == set(metrics.CATALOG)
    assert all(rows == {} for rows in empty.values())


def test_instance_type_views_phase_and_pending() -> None:
    got = samples()
    assert got["gpustack_instance_type_capacity"] == {
        ("a10g", "exclusive"): 2.0,
        ("a10g", "shared"): 27.0,
        ("a10g", "sliced"): 270.0,
        ("a10g", "partitioned"): 0.0,
        ("a10g", "cpu"): 72.0,
    }
    assert got["gpustack_instance_type_remaining"] == {
        ("a10g", "exclusive"): 0.0,
        ("a10g", "shared"): 7.0,
        ("a10g", "sliced"): 150.0,
        ("a10g", "partitioned"): 0.0,
        ("a10g", "cpu"): 1.5,
    }
    assert got["gpustack_instance_type_phase"] == {
        ("a10g", "Active"): 1.0,
        ("a10g", "Inactive"): 0.0,
        ("a10g", "Draining"): 0.0,
        ("fresh", "Active"): 0.0,
        ("fresh", "Inactive"): 0.0,
        ("fresh", "Draining"): 0.0,
    }
    # waiting-1 and the evicted waiting-2; not the admitted, finished, deactivated or other queue's.
    assert got["gpustack_instance_type_pending_workloads"] == {("a10g",): 2.0, ("fresh",): 0.0}


def test_node_cards_by_mode_and_unhealthy() -> None:
    got = samples()
    # GPU-3 has no ledger entry: free (none).
    assert got["gpustack_node_cards"] == {
        ("node-1", "nvidia", "none"): 2.0,
        ("node-1", "nvidia", "exclusive"): 1.0,
        ("node-1", "nvidia", "shared"): 1.0,
        ("node-1", "nvidia", "sliced"): 0.0,
        ("node-1", "nvidia", "partitioned"): 1.0,
    }
    assert got["gpustack_node_cards_unhealthy"] == {("node-1", "nvidia"): 1.0}


def test_model_deployment_replicas_and_phase() -> None:
    got = samples()
    assert got["gpustack_model_deployment_replicas_desired"] == {
        ("team-a", "qwen", "prefill"): 3.0,
        ("team-a", "qwen", "decode"): 1.0,  # replicas absent: one
        ("team-b", "llama", "server"): 1.0,
    }
    assert got["gpustack_model_deployment_replicas_ready"] == {
        ("team-a", "qwen", "prefill"): 2.0,
        ("team-a", "qwen", "decode"): 0.0,
        ("team-b", "llama", "server"): 0.0,
    }
    phases = got["gpustack_model_deployment_phase"]
    assert {k: v for k, v in phases.items() if k[1] == "qwen"} == {
        ("team-a", "qwen", "Starting"): 0.0,
        ("team-a", "qwen", "Ready"): 0.0,
        ("team-a", "qwen", "Degraded"): 1.0,
        ("team-a", "qwen", "Deleting"): 0.0,
    }
    assert sum(v for k, v in phases.items() if k[1] == "llama") == 0.0  # no status yet: no phase


def test_instance_phase_known_ones_and_a_pod_derived_one() -> None:
    got = samples()["gpustack_instance_phase"]
    assert {k[2]: v for k, v in got.items() if k[1] == "dev"} == {
        "Starting": 0.0,
        "Ready": 1.0,
        "Stopping": 0.0,
        "Stopped": 0.0,
        "Deleting": 0.0,
    }
    assert {k[2]: v for k, v in got.items() if k[1] == "crashing" and v} == {"CrashLoopBackOff": 1.0}


def test_model_artifact_nodes_and_progress() -> None:
    got = samples()
    assert got["gpustack_model_artifact_nodes"] == {
        ("team-a", "new", "ready"): 0.0,
        ("team-a", "new", "downloading"): 0.0,
        ("team-a", "new", "failed"): 0.0,
        ("team-a", "qwen", "ready"): 1.0,
        ("team-a", "qwen", "downloading"): 2.0,
        ("team-a", "qwen", "failed"): 0.0,
    }
    assert got["gpustack_model_artifact_download_percent"] == {("team-a", "qwen"): 40.0}


def test_kv_cache_pool_and_backend_usage() -> None:
    got = samples()
    assert got["gpustack_kv_cache_pool_quota_bytes"] == {("quiet",): GI, ("shared",): 64 * GI}
    assert got["gpustack_kv_cache_pool_used_bytes"] == {("shared",): 16 * GI}
    assert got["gpustack_kv_cache_backend_capacity_bytes"] == {("mooncake",): 128 * GI}
    assert got["gpustack_kv_cache_backend_used_bytes"] == {("mooncake",): GI}


def test_garbage_in_a_status_is_left_out_not_raised() -> None:
    broken = {
        "InstanceType": [{"metadata": {"name": "odd"}, "status": {"accelerator": view("1", "lots", "2")}}],
        "KVCacheBackend": [{"metadata": {"name": "b"}, "status": {"capacity": {"total": True}}}],
        "Devices": [{"metadata": {"name": "n"}, "spec": {"groups": []}, "status": None}],
    }
    got = samples(broken)
    assert got["gpustack_instance_type_capacity"] == {("odd", "exclusive"): 2.0}
    assert got["gpustack_instance_type_remaining"] == {}
    assert got["gpustack_kv_cache_backend_capacity_bytes"] == {}
    assert got["gpustack_node_cards"] == {}


class FakeInformer:
    def __init__(self, items: list[dict[str, Any]], synced: bool = True) -> None:
        self.items = list(items)
        self._synced = synced

    def list(self) -> list[dict[str, Any]]:
        return list(self.items)

    def synced(self) -> bool:
        return self._synced


class FakeManager:
    def __init__(self, unsynced: tuple[str, ...] = ()) -> None:
        self.asked: list[str] = []
        self.unsynced = unsynced

    def informer(self, kind: str) -> FakeInformer:
        self.asked.append(kind)
        return FakeInformer(OBJECTS.get(kind, []), kind not in self.unsynced)


def test_the_collector_reads_the_managers_informers_at_scrape_time() -> None:
    manager = FakeManager(unsynced=("Instance",))
    registry = CollectorRegistry()
    collector = metrics.register(manager, registry)
    assert manager.asked == list(metrics.KINDS)  # asked once, at construction (before Manager.start)
    text = generate_latest(registry).decode()
    assert 'gpustack_node_cards{manufacturer="nvidia",mode="exclusive",node="node-1"} 1.0' in text
    assert "gpustack_instance_phase{" not in text  # not synced yet: no series rather than zeros
    assert "# TYPE gpustack_instance_phase gauge" in text
    second_node = dict(DEVICES, metadata={"name": "node-2"})
    collector.informers["Devices"].items.append(second_node)  # a new object shows at the next scrape
    assert 'node="node-2"' in generate_latest(registry).decode()
    # A second registration replaces the first instead of colliding.
    metrics.register(FakeManager(), registry)
    assert generate_latest(registry).decode().count("# TYPE gpustack_node_cards gauge") == 1
