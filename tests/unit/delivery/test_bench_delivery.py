"""The delivery benchmark runs end to end on tiny inputs and prints its JSON lines (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from loadtests import bench_delivery


def test_benchmark_prints_both_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_delivery.main(["--size-mib", "2", "--files", "2", "--rounds", "1", "--publishes", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    download, publish = lines
    assert download["bench"] == "delivery_download" and download["bytes"] == (2 << 20) + 16
    assert download["files"] == 3 and download["plain_mib_per_s"] > 0 and download["ratio"] > 0
    assert len(download["round_ratios"]) == 1 and download["cpus"] >= 1
    assert download["plain_cpu_s_per_gib"] >= 0 and download["verified_cpu_s_per_gib"] >= 0
    assert publish["bench"] == "delivery_cached_publish"
    assert publish.get("publishes") == 3 or "skipped" in publish
