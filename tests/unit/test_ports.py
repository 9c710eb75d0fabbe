"""The fixed-port table (tests/cluster/ports.py): no two users of a port, and no default written
anywhere else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster import ports

REPO = Path(__file__).resolve().parents[2]


def test_no_two_ranges_share_a_port() -> None:
    assert ports.overlaps() == []


def test_every_range_is_below_the_ephemeral_range_and_well_formed() -> None:
    for name, span in ports.RANGES.items():
        assert 1024 < span.first <= span.last < 32768, name


def test_control_plane_blocks_fill_their_ranges_in_order() -> None:
    lanes = [ports.e2e_prefix(shard) for shard in range(ports.E2E_LANES)]
    for name in ["dev-control-plane"] + [
        f"{p}-{kind}" for p in lanes for kind in ("control-plane", "second-cluster")
    ]:
        block = ports.block(name)
        assert list(block) == list(ports.CONTROL_PLANE)
        assert block["ETCD"] == ports.RANGES[name].first and block["NFD"] == ports.RANGES[name].last


def test_node_ranges_hold_whole_slots() -> None:
    for name in ports.node_ranges():
        span = ports.RANGES[name]
        assert (span.last - span.first + 1) % ports.NODE_PORTS == 0, name


def test_every_e2e_lane_has_every_kind_of_range() -> None:
    kinds = {"host", "control-plane", "nodes", "kwok-dm", "second-cluster", "store"}
    for shard in range(ports.E2E_LANES):
        prefix = ports.e2e_prefix(shard)
        assert {kind for kind in kinds if f"{prefix}-{kind}" in ports.RANGES} == kinds, prefix
    with pytest.raises(ValueError, match="lanes 0-"):
        ports.e2e_prefix(ports.E2E_LANES)


def test_a_port_outside_its_range_is_refused() -> None:
    span = ports.RANGES["bench-store"]
    assert ports.port("bench-store", span.last - span.first) == span.last
    with pytest.raises(ValueError, match="outside"):
        ports.port("bench-store", span.last - span.first + 1)


def test_lib_sh_repeats_the_dev_block() -> None:
    text = (REPO / "tests" / "cluster" / "lib.sh").read_text()
    found = {name: int(port) for name, port in re.findall(r'"\$\{GPUSTACK_(\w+)_PORT:-(\d+)\}"', text)}
    dev = ports.block("dev-control-plane")
    assert found == {name: port for name, port in dev.items() if name != "WORKER"}


def _port_literals(path: Path) -> list[str]:
    text = path.read_text(errors="replace")
    return [
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for match in re.finditer(r"(?<![\w.])2(7[6-9]\d\d)(?![\w.])", text)
        if int(match.group(0)) in _ALL_FIXED
    ]


_ALL_FIXED = {p for span in ports.RANGES.values() for p in range(span.first, span.last + 1)}


def test_no_fixed_port_is_written_outside_the_table() -> None:
    """Code and scripts take their defaults from the table (docs may quote them)."""
    roots = [REPO / "tests", REPO / "loadtests", REPO / "scripts"]
    allowed = {REPO / "tests" / "cluster" / "ports.py", REPO / "tests" / "cluster" / "lib.sh"}
    found = [
        literal
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.suffix in (".py", ".sh") and path.is_file() and path not in allowed
        for literal in _port_literals(path)
    ]
    assert not found, found


def test_every_e2e_lane_has_every_range_the_first_has() -> None:
    kinds = {name.removeprefix("e2e-") for name in ports.RANGES if name.startswith("e2e-")}
    for shard in (0, 1):
        prefix = ports.e2e_prefix(shard)
        for kind in kinds:
            first, other = ports.RANGES[f"e2e-{kind}"], ports.RANGES[f"{prefix}-{kind}"]
            assert other.last - other.first == first.last - first.first, (prefix, kind)
