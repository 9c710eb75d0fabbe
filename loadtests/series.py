"""The benchmarks' series as JSON files, for ``loadtests/report.py`` (``make bench-report``).

Every benchmark that feeds a plot takes ``--series-out DIR``: besides printing its JSON lines as
always, it writes them to ``DIR/<benchmark>[-<tag>].json``, one file per run, the tag naming the
size it ran at (``bench_pools-nodes1000.json``, ``bench_modeldeployment-cluster-h100-100.json``), so
runs at several sizes sit side by side and a run again at one size replaces its file.  Without the
option nothing is written (the smoke runs in tests/ leave no file behind).  ``make bench-report``
reads ``.dev/bench-series/`` (:data:`DEFAULT_DIR`) unless told ``SERIES=DIR``.

A file: ``{"bench", "tag", "written", "machine": {...}, "argv", "rows": [...]}``; ``rows`` are the
JSON objects the run printed, in order.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO / ".dev" / "bench-series"


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--series-out",
        metavar="DIR",
        type=Path,
        default=None,
        help="also write the printed rows to DIR/<benchmark>[-<tag>].json for loadtests/report.py "
        f"(make bench-report reads {DEFAULT_DIR.relative_to(REPO)}/)",
    )


def machine() -> dict[str, Any]:
    """What the figures were measured on (compare files from one machine only)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "loadavg_1m": round(os.getloadavg()[0], 2),  # when the file is written: the end of the run
    }


def write(directory: Path | None, bench: str, rows: list[dict[str, Any]], tag: str = "") -> Path | None:
    """Write one run's rows; nothing when ``directory`` is ``None``.  Returns the file written."""
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (f"{bench}-{tag}.json" if tag else f"{bench}.json")
    doc = {
        "bench": bench,
        "tag": tag,
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "argv": sys.argv[1:],
        "rows": rows,
    }
    scratch = path.with_suffix(".json.partial")
    scratch.write_text(json.dumps(doc, indent=1) + "\n")
    scratch.replace(path)
    return path


def read(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every series file under ``directory``, by benchmark, each list sorted by tag; a file that
    does not read as a series is skipped with a line on stderr."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            bench, rows = doc["bench"], doc["rows"]
            if not isinstance(bench, str) or not isinstance(rows, list):
                raise TypeError("bench must be a string and rows a list")
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"{path}: not a series file ({error}); skipped", file=sys.stderr)
            continue
        doc["path"] = str(path)
        out.setdefault(bench, []).append(doc)
    for docs in out.values():
        docs.sort(key=lambda d: str(d.get("tag") or ""))
    return out
