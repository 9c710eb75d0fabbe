"""The benchmarks that need a control plane, at their smallest size against the e2e cluster: they
finish, every phase converges, and their JSON lines carry the fields docs/performance.md quotes.
No figure is judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.net import free_port

from .conftest import harness

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def _run(cluster: harness.ClusterInfo, module: str, *args: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", f"loadtests.{module}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "KUBECONFIG": str(cluster.kubeconfig),
            "GPUSTACK_CLUSTER_DIR": str(cluster.state_dir),
        },
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_bench_pools_converges_at_three_nodes(cluster: harness.ClusterInfo) -> None:
    # Two writer processes: the path the 10,000-node figures take (docs/performance.md).
    lines = _run(
        cluster, "bench_pools", "--nodes", "3", "--threads", "2", "--writers", "2", "--timeout", "180"
    )
    assert [line for line in lines if line["phase"] == "timeout"] == []
    phases = [line["phase"] for line in lines]
    for phase in ("setup", "controllers", "build", "burst", "single", "memory", "reconciles", "cleanup"):
        assert phase in phases, phases
    assert next(line for line in lines if line["phase"] == "memory")["max_rss_mib"] > 0
    build = {k: v for line in lines if line["phase"] == "build" for k, v in line.items()}
    for field in (
        "status_converged_after_last_write_s",
        "queue_converged_after_last_write_s",
        "node_keys_on_every_node_after_last_write_s",
    ):
        assert build[field] is not None, build
    if next(line for line in lines if line["phase"] == "controllers")["source"] == "this process":
        depths = build["queue_depths"]  # every local controller's backlog, sampled while writing
        assert set(depths) == {
            "resource-flavors",
            "instance-types",
            "cluster-queues",
            "local-queues",
            "node-capacity",
            "devices-labels",
        }, depths
        assert all(d["peak"] >= d["at_last_write"] >= 0 for d in depths.values()), depths


def test_bench_compares_with_kueue_s_own_webhooks(cluster: harness.ClusterInfo) -> None:
    lines = _run(
        cluster,
        "bench",
        "--duration",
        "1",
        "--rounds",
        "1",
        "--warm-up",
        "0",
        "--workers-scan",
        "",  # the worker-process scan and the warm-up have their smoke run in tests/unit
        "--connections",
        "2",
        "--skip-speedups",
        "--port",
        str(free_port()),
        "--cluster-dir",
        str(cluster.state_dir),
    )
    summary = lines[-1]
    for verb in ("validate", "mutate"):
        for field in ("rps", "p99_ms", "per_cpu_second"):
            assert f"kueue_{verb}_{field}" in summary, sorted(summary)
        assert f"vs_kueue_{verb}_per_cpu" in summary


def test_bench_modeldeployment_cluster_mode_at_two_deployments(cluster: harness.ClusterInfo) -> None:
    lines = _run(
        cluster,
        "bench_modeldeployment",
        "cluster",
        "--deployments",
        "2",
        "--threads",
        "2",
        "--timeout",
        "300",
    )
    figures = {line["figure"]: line for line in lines}
    assert set(figures) == {
        "ready",
        "phases",
        "cpu_per_reconcile_ms",
        "reconcile_cpu_ms",
        "per_controller",
        "converged",
    }, lines
    assert figures["ready"]["deployments"] == 2 and figures["ready"]["seconds"] is not None
    # Where the apply-to-Ready time went: each milestone reached, in order, by the end.
    phases = figures["phases"]
    order = ["pods_created_s", "workloads_admitted_s", "pods_ready_s", "deployments_ready_s"]
    assert all(phases[name] is not None for name in order), phases
    assert phases["pods_created_s"] <= phases["pods_ready_s"] <= phases["deployments_ready_s"], phases
    assert phases["workloads_admitted_s"] <= phases["pods_ready_s"], phases
    assert figures["cpu_per_reconcile_ms"]["reconciles"] > 0
    own = figures["reconcile_cpu_ms"]
    assert own["reconciles"] == figures["cpu_per_reconcile_ms"]["reconciles"] and own["cpu_seconds"] > 0, own
    assert own["api_lists"] == 0, own  # a pass after its own writes waits for the Pod cache
    # Every controller that reconciled, timed alike: the ModelDeployment one's row is the figure above.
    per = figures["per_controller"]["controllers"]
    assert per["model-deployment"]["reconciles"] == own["reconciles"], per
    assert "node-devices-check" in per and all(row["reconciles"] > 0 for row in per.values()), per
    assert figures["converged"]["objects"] > 0 and "changed" in figures["converged"]
    assert figures["converged"]["api_lists"] == 0, figures["converged"]  # a converged pass reads the cache


def test_bench_controllers_measures_every_list_keyed_kind_at_its_smallest(
    cluster: harness.ClusterInfo,
) -> None:
    # The smallest size that runs every path: two Instances, two Bindings (both namespaces), one
    # artifact with its two consumers (a deployment and an Instance).
    lines = _run(
        cluster,
        "bench_controllers",
        "--instances",
        "2",
        "--kv-bindings",
        "2",
        "--delivery",
        "1",
        "--threads",
        "2",
        "--timeout",
        "300",
    )
    assert lines[0]["figure"] == "setup" and lines[0]["nodes"] >= 1, lines
    converge = {line["kind"]: line for line in lines if line["figure"] == "converge"}
    resync = {line["kind"]: line for line in lines if line["figure"] == "resync"}
    assert set(converge) == set(resync) == {"instances", "kv-bindings", "delivery"}, lines
    measured = {
        "instances": ("instances",),
        "kv-bindings": ("kv-cache-pool-bindings", "kv-cache-pools"),
        "delivery": ("model-artifacts",),
    }
    objects = {"instances": 2, "kv-bindings": 2, "delivery": 3}
    for kind, names in measured.items():
        line = converge[kind]
        assert line["objects"] == objects[kind] and line["seconds"] > 0, line
        assert set(line["controllers"]) == set(names), line
        for name in names:
            row = line["controllers"][name]
            assert row["reconciles"] > 0 and row["ms"] > 0, (name, row)
            assert row["mapper_events"] > 0 and row["mapper_us"] > 0, (name, row)
        # The resync reconciled every key it enqueued, and a converged pass rewrote nothing.
        done = resync[kind]
        assert all(count > 0 for count in done["reconciles"].values()), done
        assert set(names) <= set(done["reconciles"]), done
        assert done["objects"] >= objects[kind] and done["rewritten"] == 0, done
    # The consumers converged through their own controllers, which reconciled meanwhile.
    assert {"instances", "model-deployment"} <= set(converge["delivery"]["others"]), converge["delivery"]
    assert resync["delivery"]["reconciles"]["instances"] >= 1
    per_binding = next(line for line in lines if line["figure"] == "kv_pool_pass_per_binding")
    assert per_binding["bindings"] == 2 and per_binding["ms"] > 0, per_binding


def test_bench_pool_fill_fills_two_nodes_in_every_phase(cluster: harness.ClusterInfo) -> None:
    lines = _run(
        cluster, "bench_pool_fill", "--nodes", "2", "--idle", "1", "--threads", "2", "--timeout", "300"
    )
    phases = {line["phase"]: line for line in lines}
    assert set(phases) == {"whole", "waiting", "sliced"}, lines
    assert phases["whole"]["admitted"] == phases["whole"]["pods"] == 16
    assert phases["sliced"]["admitted"] == phases["sliced"]["pods"] == 32
    for phase in ("whole", "sliced"):
        for field in ("fill_s", "gate3_retries_per_admitted", "kueue_attempts_per_admitted", "worker_cpu_s"):
            assert field in phases[phase], phases[phase]
    assert "kueue_attempts" in phases["waiting"]


def test_kueue_tas_repro_places_every_pod_on_this_kueue(cluster: harness.ClusterInfo) -> None:
    (line,) = _run(cluster, "kueue_tas_repro", "--nodes", "2", "--pods", "10", "--wait", "20", "--mixed")
    # Kueue v0.19.0 has the fix of kubernetes-sigs/kueue#12005: both nodes serve (docs/scheduling.md).
    assert line["placed"] == {"tas-repro-0": 6, "tas-repro-1": 4}, line
