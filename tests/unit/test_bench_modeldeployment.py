"""A tiny run of loadtests.bench_modeldeployment's pure mode: it runs and prints JSON lines (the
figures themselves are the benchmark's to report, not the suite's to assert)."""

from __future__ import annotations

import json

from loadtests import bench_modeldeployment


def test_render_mode_prints_json_lines(capsys) -> None:
    assert bench_modeldeployment.main(["render", "--pods", "8", "--deployments", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["figure"] for line in lines] == ["render_per_pod", "converged_plan"]
    assert {"pods", "us_per_pod"} <= set(lines[0]) and {"replicas", "writes", "ms"} <= set(lines[1])
