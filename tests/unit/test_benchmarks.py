"""Every benchmark script runs at its smallest size and prints the JSON its figures in
docs/performance.md come from: a benchmark that rots fails the suite.  No figure is judged here (speed is read from full
runs on a quiet machine); only that each script finishes and that its lines carry their fields.

The other benchmarks' smoke runs live beside their features (test_bench_devicemanager,
test_bench_gateway, delivery/test_bench_delivery, test_bench_modeldeployment); those that need a
control plane (bench_pools, the cluster mode of bench_modeldeployment, bench's Kueue comparison) run
in tests/e2e/test_benchmarks.py.  ``test_every_benchmark_has_a_smoke_run`` keeps a new script from
arriving without one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.net import free_port

REPO = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str, timeout: float = 600) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", f"loadtests.{module}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout[-2000:]
    return [json.loads(line) for line in lines]


def _has(figures: dict, *fields: str) -> None:
    missing = [field for field in fields if field not in figures]
    assert not missing, f"missing {missing} in {sorted(figures)}"


def test_bench_fastpath() -> None:
    (line,) = _run("bench_fastpath", "--repeats", "1", "--seconds", "0.01")
    for module in ("quantity", "requests", "fit"):
        _has(line[module], "compiled_s", "interpreted_s", "speedup")


def test_bench_argv() -> None:
    (line,) = _run("bench_argv", "--rounds", "1", "--repeat", "1")
    _has(line, "bench", "compiled_s", "interpreted_s", "speedup", "roles", "mean_tokens")


def test_bench_gate3() -> None:
    rows = _run("bench_gate3", "--sizes", "3", "--repeat", "2")
    assert {row["scenario"] for row in rows} == {"tas", "pool-first-fit", "pool-retry"}
    for row in rows:
        _has(
            row,
            "nodes",
            "cards",
            "workloads",
            "verdict",
            "median_ms",
            "p90_ms",
            "max_ms",
            "runs",
            "informer_ms",
        )


def test_bench_kvcache() -> None:
    rows = _run("bench_kvcache", "--pods", "5", "--tenants", "2")
    injects = [row for row in rows if row["figure"] == "inject"]
    assert {row["engine"] for row in injects} == {"vLLM", "SGLang"}
    for row in injects:
        _has(row, "decisions", "median_us", "p99_us")
    (ledger,) = [row for row in rows if row["figure"] == "ledger"]
    _has(ledger, "read_list_ms", "converged_pass_ms", "errors")


def test_bench_dashboard() -> None:
    """A two-cluster fleet in headless Chromium (scripts/ensure-chromium.sh, a `make test` step)."""
    (line,) = _run("bench_dashboard", "--clusters", "2", "--nodes", "20", "--loads", "1", "--seconds", "1")
    _has(line, "clusters", "nodes_per_cluster", "fold_ms", "page_ms", "gateway_cpu")


def test_run_locust() -> None:
    # 15 s, not 5: on a machine whose two cores the e2e lane keeps busy, 5 s once ended before the
    # first request of either user completed (0 requests, a failed smoke run). Up to 2 s between a
    # user's tasks: each task still runs, the other lanes keep the cores (flat out it cost 14 CPU-s).
    (summary,) = _run(
        "run_locust",
        *("--users", "2", "--spawn-rate", "2", "--time", "15s", "--pause", "2"),
        *("--port", str(free_port())),
    )
    _has(summary, "requests", "failures", "rps", "p50_ms", "p99_ms")


def test_bench(tmp_path: Path) -> None:
    assert shutil.which("wrk"), (
        "wrk drives the webhook benchmark: scripts/ensure-wrk.sh installs it (make test)"
    )
    lines = _run(
        "bench",
        "--duration",
        "1",
        "--rounds",
        "1",
        "--warm-up",
        "0",
        "--workers-scan",
        "1",
        "--connections",
        "2",
        "--quick-speedups",
        "--port",
        str(free_port()),
        "--cluster-dir",
        str(tmp_path / "no-cluster"),  # the Kueue comparison needs make dev; its smoke is the e2e one
    )
    _has(
        lines[-1],
        "null_rps",
        "pod_rps",
        "pod_p50_ms",
        "pod_p99_ms",
        "pod_vs_null",
        "pod_mutate_rps",
        "md_rps",
        "md_p99_ms",
        "argv_speedup",
        "fit_speedup",
        "requests_speedup",
        "quantity_speedup",
        "workers_rps",
        "pod_per_cpu_second",
        "md_queue_mean_ms",
        "one_connection",
    )
    for endpoint in ("null", "pod", "md"):
        _has(lines[-1]["one_connection"][endpoint], "rps", "p50_ms", "p99_ms")


def test_bench_inprocess() -> None:
    """Ours and Kueue's Pod webhooks in process (Kueue's through a Go program built from the pinned
    Kueue module, `make cluster-binaries` having fetched it): each case answered, the ratios there."""
    rows = _run("bench_inprocess", "--seconds", "0.2", "--rounds", "1")
    cases = {row["case"]: row for row in rows if "case" in row}
    assert set(cases) == {
        "ours_null",
        "ours_validate",
        "ours_mutate",
        "ours_md",
        "kueue_validate",
        "kueue_mutate",
    }
    for row in cases.values():
        assert row["reviews"] >= row["bodies"] > 0, row
        _has(row, "cpu_us_per_review")
    _has(cases["ours_validate"]["answers"], "allowed", "patched")
    _has(rows[-1], "vs_kueue_validate", "vs_kueue_mutate", "ours_validate_over_null_us")


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = sorted(
        path.stem
        for path in (REPO / "loadtests").glob("*.py")
        if path.stem.startswith("bench") or path.stem.startswith("run_")
    )
    tests = (
        "\n".join(
            path.read_text()
            for path in (REPO / "tests").rglob("test_*.py")
            if path != Path(__file__).resolve()
        )
        + Path(__file__).read_text().split("def test_every_benchmark_has_a_smoke_run")[0]
    )
    missing = [
        name
        for name in scripts
        if f'"{name}"' not in tests and f"loadtests.{name}" not in tests and f"import {name}" not in tests
    ]
    assert not missing, f"benchmarks without a smoke run in tests/: {missing}"
