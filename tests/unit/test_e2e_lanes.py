"""scripts/e2e-lanes.py: every e2e module runs in exactly one lane, and the lanes are balanced."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("e2e_lanes", REPO / "scripts" / "e2e-lanes.py")
assert _spec is not None and _spec.loader is not None
e2e_lanes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e_lanes)


def test_every_module_runs_in_exactly_one_lane() -> None:
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "e2e").glob("test_*.py"))
    for count in (1, 2):
        lanes = e2e_lanes.lanes(count)
        assert sorted(m for lane in lanes for m in lane) == modules


def test_two_lanes_are_within_the_largest_module_of_each_other() -> None:
    weights = json.loads((REPO / "tests" / "e2e" / "durations.json").read_text())
    loads = [sum(float(weights.get(m, e2e_lanes.DEFAULT_S)) for m in lane) for lane in e2e_lanes.lanes(2)]
    assert abs(loads[0] - loads[1]) <= max(weights.values())
