"""Smoke test of loadtests/bench_devicemanager.py at tiny size: it runs and prints its JSON lines
(figures are printed, never asserted)."""

from __future__ import annotations

import json

from loadtests import bench_devicemanager


def test_benchmark_prints_one_json_line_per_case(capsys):
    assert (
        bench_devicemanager.main(
            [
                "--allocations",
                "8",
                "--concurrency",
                "2",
                "--discovery-cards",
                "2",
                "--repeat",
                "1",
                "--nics",
                "2",
                "--vfs",
                "2",
            ]
        )
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["case"] for line in lines] == [
        "preferred",
        "allocate",
        "preferred-floor",
        "allocate-floor",
        "discovery",
        "interfaces",
    ]
    assert lines[1]["held"] + lines[1]["refused"] == 8 and lines[1]["annotation_write"] is False
    assert lines[3]["held"] + lines[3]["refused"] == 8 and lines[3]["identify"] == "floor"
    assert lines[4]["cards"] == 2 and {"p50_ms", "p99_ms", "max_ms"} <= set(lines[4])
    assert lines[5]["nics"] == 2 and lines[5]["vfs"] == 2 and lines[5]["calls"] == 1
