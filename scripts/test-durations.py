#!/usr/bin/env python3
"""Per-module test time from the JUnit files `make test` writes (.dev/test/*.xml): a Markdown table
for docs/testing.md. pytest's JUnit time of a test is its setup, call and teardown together, so a
module fixture's start and stop are counted in the module's first and last test.

    .venv/bin/python scripts/test-durations.py [.dev/test/e2e0.xml ...] [--top 30]
    .venv/bin/python scripts/test-durations.py --weights    # tests/e2e/durations.json from .dev/test/e2e*.xml

The weights file is the order the e2e lanes take modules in (tests/cluster/lanequeue.py: longest first).
"""

from __future__ import annotations

import argparse
import collections
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def modules(paths: list[Path]) -> dict[str, list[float]]:
    """module -> [tests, seconds, failures]"""
    out: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            module = case.get("classname", "").split("[")[0]
            parts = module.split(".")
            # tests.unit.delivery.test_x(.Class) -> tests/unit/delivery/test_x.py
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            name = "/".join(parts) + ".py" if parts else module
            row = out[name]
            row[0] += 1
            row[1] += float(case.get("time") or 0)
            row[2] += int(case.find("failure") is not None or case.find("error") is not None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--weights", action="store_true", help="write tests/e2e/durations.json")
    args = parser.parse_args()
    if args.weights:
        found = modules(args.files or sorted(Path(".dev/test").glob("e2e*.xml")))
        weights = {
            name: round(row[1]) for name, row in sorted(found.items()) if name.startswith("tests/e2e/")
        }
        Path("tests/e2e/durations.json").write_text(json.dumps(weights, indent=1, sort_keys=True) + "\n")
        print(f"tests/e2e/durations.json: {len(weights)} modules, {sum(weights.values())} s")
        return
    files = args.files or sorted(Path(".dev/test").glob("*.xml"))
    rows = sorted(modules(files).items(), key=lambda kv: -kv[1][1])
    total = sum(r[1] for _, r in rows)
    print(
        f"{sum(int(r[0]) for _, r in rows)} tests, {total:.0f} s of test time in {', '.join(map(str, files))}\n"
    )
    print("| module | tests | seconds |")
    print("|---|---|---|")
    for name, (tests, seconds, failed) in rows[: args.top]:
        print(f"| {name} | {int(tests)} | {seconds:.1f}{' (failed)' if failed else ''} |")


if __name__ == "__main__":
    main()
