"""``make bench-report``: loadtests/report.py renders each figure from the benchmarks' series
files (small synthetic ones here, plus bench_fastpath's own ``--series-out``), names a missing
series instead of failing, and reports a series it cannot read."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from loadtests import bench_fastpath, report, series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    """A whole PNG: the signature, an IHDR with a size, chunks whose CRCs hold, and IEND last."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    pos, kinds = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind!r}"
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            assert width > 100 and height > 100
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds


def write(directory: Path, bench: str, rows: list[dict], tag: str = "") -> None:
    assert series.write(directory, bench, rows, tag) is not None


def synthetic(directory: Path) -> None:
    for deployments, ms, seconds in ((10, 9.0, 4.0), (100, 10.3, 40.0), (1000, 12.1, 400.0)):
        rows = [
            {
                "figure": "ready",
                "pool": "h100",
                "deployments": deployments,
                "pods": 2 * deployments,
                "seconds": seconds,
            },
            {"figure": "cpu_per_reconcile_ms", "reconciles": 3 * deployments, "cpu_seconds": 1.0, "ms": ms},
            {"figure": "converged", "reconciles": deployments, "objects": 3 * deployments, "changed": 0},
        ]
        write(directory, "bench_modeldeployment", rows, f"cluster-h100-{deployments}")
    write(directory, "bench_modeldeployment", [{"figure": "render", "pods": 5}], "render-5")
    for nodes in (10, 100):
        rows = [
            {"phase": "setup", "nodes": nodes, "cards_per_node": 8},
            {"phase": "build", "wrote_nodes_and_ledgers_s": 1.0},
            {
                "phase": "build",
                "status_converged_after_last_write_s": 0.2,
                "queue_converged_after_last_write_s": 0.4,
            },
            {"phase": "build", "node_keys_on_every_node_after_last_write_s": 0.5},
            {"phase": "burst", "status_converged_after_last_write_s": 0.3},
            {"phase": "single", "status_converged_after_write_s": 0.01},
        ]
        write(directory, "bench_pools", rows, f"nodes{nodes}")
    endpoints = [
        {"endpoint": name, "rps": rps, "p50_ms": 1.0, "p90_ms": 1.5, "p99_ms": 2.5}
        for name, rps in (("null", 8000), ("pod", 7000), ("md", 4000))
    ]
    write(directory, "bench", [*endpoints, {"pod_rps": 7000}])
    gate3 = [
        {
            "scenario": scenario,
            "nodes": nodes,
            "median_ms": ms * nodes,
            "p90_ms": 1.2 * ms * nodes,
            "informer_ms": ms * 100,
        }
        for scenario, ms in (("tas", 0.003), ("pool-first-fit", 0.006), ("pool-retry", 0.07))
        for nodes in (100, 1000)
    ]
    write(directory, "bench_gate3", gate3)
    case = {"calls": 10, "p50_ms": 1.0, "p99_ms": 1.8, "max_ms": 3.0, "concurrency": 1}
    write(
        directory,
        "bench_devicemanager",
        [{**case, "case": c} for c in ("preferred", "allocate", "admission", "allocate-stress")]
        + [{"case": "discovery", "calls": 2, "p50_ms": 0.5, "p99_ms": 0.6, "max_ms": 0.6}],
    )


def test_every_figure_renders_from_its_series(tmp_path: Path) -> None:
    data, out = tmp_path / "series", tmp_path / "png"
    synthetic(data)
    # A benchmark writes its own series (small size): the report reads what it writes.
    assert bench_fastpath.main(["--repeats", "1", "--seconds", "0.01", "--series-out", str(data)]) == 0
    assert report.main(["--series", str(data), "--out", str(out)]) == 0
    names = {plot.name for plot in report.PLOTS}
    assert {p.stem for p in out.glob("*.png")} == names
    for name in names:
        assert_png(out / f"{name}.png")


def test_a_missing_series_is_named_and_the_rest_still_drawn(tmp_path: Path, capsys) -> None:
    data, out = tmp_path / "series", tmp_path / "png"
    write(data, "bench_gate3", [{"scenario": "tas", "nodes": 3, "median_ms": 0.3, "p90_ms": 0.4}])
    assert report.main(["--series", str(data), "--out", str(out)]) == 0
    assert [p.name for p in out.glob("*.png")] == ["gate3.png"]
    assert_png(out / "gate3.png")
    err = capsys.readouterr().err
    for plot in report.PLOTS:
        if plot.bench != "bench_gate3":
            assert f"missing: {plot.name}.png needs {data}/{plot.bench}*.json" in err
    assert "loadtests.bench_pools --nodes N --series-out" in err


def test_no_series_directory_at_all_is_reported_not_a_crash(tmp_path: Path, capsys) -> None:
    assert report.main(["--series", str(tmp_path / "none"), "--out", str(tmp_path / "png")]) == 0
    assert capsys.readouterr().err.count("missing: ") == len(report.PLOTS)


@pytest.mark.parametrize("rows", [[{"phase": "build"}], "not a list"])
def test_a_series_that_does_not_read_is_reported(tmp_path: Path, capsys, rows) -> None:
    data = tmp_path / "series"
    data.mkdir()
    (data / "bench_pools-nodes1.json").write_text(json.dumps({"bench": "bench_pools", "rows": rows}))
    code = report.main(["--series", str(data), "--out", str(tmp_path / "png")])
    err = capsys.readouterr().err
    if isinstance(rows, list):  # a file of the right shape whose rows lack the figure's fields
        assert code == 1 and "failed: pools.png" in err
    else:  # not a series file at all: skipped, and the figure counts as missing
        assert code == 0 and "not a series file" in err and "missing: pools.png" in err
    assert not (tmp_path / "png" / "pools.png").exists()
