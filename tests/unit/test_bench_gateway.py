"""A tiny run of the gateway benchmark: it runs and prints the fields it promises (no figure is
judged here; speed is read from the full run, see loadtests/bench_gateway.py)."""

from __future__ import annotations

import json

from loadtests import bench_gateway


def test_a_tiny_run_prints_one_json_line_with_every_field(capsys):
    assert bench_gateway.main(["--clusters", "3", "--types", "5", "--updates", "40"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    figures = json.loads(line)
    assert set(figures) == {
        "bench",
        "clusters",
        "instance_types",
        "items",
        "updates",
        "deltas",
        "load_ms",
        "fold_updates_per_s",
        "fold_updates_per_cpu_s",
        "watch_updates_per_s",
        "watch_updates_per_cpu_s",
        "watch_mib_encoded",
    }
    assert (figures["clusters"], figures["instance_types"], figures["updates"]) == (3, 5, 40)
    assert figures["items"] == 5  # every cluster serves the same five pools: one item each
