#!/usr/bin/env python3
"""Split the e2e modules into N lanes of about equal time, for scripts/test.sh.

Each lane runs its modules one after another against its own control plane (tests/cluster/ports.py
gives every lane its ports). The weights are the modules' seconds from a `make test` run
(tests/e2e/durations.json, written by ``scripts/test-durations.py --weights``); a module the file
does not know yet weighs 60 s. Longest first onto the lightest lane, then each lane in name order.

    scripts/e2e-lanes.py 2 1     # the modules of lane 1 (of 0, 1), one path per line
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_S = 60.0


def lanes(count: int) -> list[list[str]]:
    weights_file = REPO / "tests" / "e2e" / "durations.json"
    weights = json.loads(weights_file.read_text()) if weights_file.exists() else {}
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "e2e").glob("test_*.py"))
    out: list[list[str]] = [[] for _ in range(count)]
    load = [0.0] * count
    for module in sorted(modules, key=lambda m: (-float(weights.get(m, DEFAULT_S)), m)):
        lightest = load.index(min(load))
        out[lightest].append(module)
        load[lightest] += float(weights.get(module, DEFAULT_S))
    return [sorted(lane) for lane in out]


if __name__ == "__main__":
    count, index = int(sys.argv[1]), int(sys.argv[2])
    print("\n".join(lanes(count)[index]))
