"""Smoke test of loadtests/bench_devicemanager.py at tiny size: it runs and prints its JSON lines
(figures are printed, never asserted), and writes them as a series with ``--series-out``."""

from __future__ import annotations

import json

from loadtests import bench_devicemanager


def test_benchmark_prints_one_json_line_per_case(capsys, tmp_path):
    argv = ["--allocations", "8", "--concurrency", "2", "--stress-allocations", "8"]
    argv += ["--discovery-cards", "2", "--repeat", "1", "--nics", "2", "--vfs", "2"]
    assert bench_devicemanager.main([*argv, "--series-out", str(tmp_path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    cases = [line["case"] for line in lines]
    assert cases == [
        "preferred",
        "allocate",
        "admission",
        "preferred-started",
        "allocate-started",
        "admission-started",
        "preferred-floor",
        "allocate-floor",
        "admission-floor",
        "preferred-stress",
        "allocate-stress",
        "admission-stress",
        "discovery",
        "interfaces",
    ]
    one, started, floor, stress = lines[1], lines[4], lines[7], lines[10]
    assert one["concurrency"] == 1 and one["held"] + one["refused"] == 8 and one["annotation_write"] is False
    assert lines[2]["calls"] == one["held"]  # one admission per Pod granted: both calls
    assert started["identify"] == "started" and started["held"] + started["refused"] == 8
    assert floor["held"] + floor["refused"] == 8 and floor["identify"] == "floor"
    assert stress["concurrency"] == 2 and stress["held"] + stress["refused"] == 8
    assert lines[12]["cards"] == 2 and {"p50_ms", "p99_ms", "max_ms"} <= set(lines[12])
    assert lines[13]["nics"] == 2 and lines[13]["vfs"] == 2 and lines[13]["calls"] == 1
    written = json.loads((tmp_path / "bench_devicemanager.json").read_text())
    assert written["bench"] == "bench_devicemanager" and written["rows"] == lines
