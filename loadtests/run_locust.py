"""Run the locust users headless against a worker started here with file lookups over TLS.

    python -m loadtests.run_locust [--users 16] [--spawn-rate 8] [--time 30s] [--pause 0.01] [--port PORT]

Prints locust's summary, then one JSON line (requests, failures, requests/s, p50/p99 ms over all
endpoints), and exits with locust's status (non-zero when any request failed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from loadtests import mix
from loadtests.bench import REPO, Server
from tests.cluster.ports import port as fixed_port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--spawn-rate", type=int, default=8)
    parser.add_argument("--time", default="30s")
    parser.add_argument(
        "--pause", type=float, default=0.01, help="a user's longest pause between two tasks, seconds"
    )
    parser.add_argument("--port", type=int, default=fixed_port("bench-worker", 1))
    args = parser.parse_args(argv)
    from certs import issue

    work = Path(tempfile.mkdtemp(prefix="gpustack-locust-"))
    objects = mix.write_objects(work / "objects")
    issue.ensure(work / "certs", ["localhost"], ["127.0.0.1"])
    server = Server(objects, work / "certs", args.port, 1)
    try:
        status = subprocess.run(
            [
                str(Path(sys.executable).with_name("locust")),
                "-f",
                str(REPO / "loadtests" / "locustfile.py"),
                "--headless",
                "-u",
                str(args.users),
                "-r",
                str(args.spawn_rate),
                "-t",
                args.time,
                "--pause",
                str(args.pause),
                "--host",
                f"https://127.0.0.1:{args.port}",
                "--only-summary",
                "--csv",
                str(work / "locust"),
            ],
            cwd=work,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        ).returncode
    finally:
        server.stop()
    summary = _summary(work / "locust_stats.csv")
    print(json.dumps(summary))
    if not summary["requests"]:
        print(
            f"run_locust: no request completed within --time {args.time} (a loaded machine, or a "
            "worker that did not answer); run longer",
            file=sys.stderr,
        )
        return status or 1
    return status


def _summary(stats: Path) -> dict[str, float | int | None]:
    """The Aggregated row of locust's CSV statistics (percentiles None when nothing was timed)."""
    with stats.open() as handle:
        row = next(r for r in csv.DictReader(handle) if r["Name"] == "Aggregated")
    return {
        "requests": int(row["Request Count"]),
        "failures": int(row["Failure Count"]),
        "rps": round(float(row["Requests/s"]), 1),
        "p50_ms": _number(row["50%"]),
        "p99_ms": _number(row["99%"]),
    }


def _number(text: str) -> float | None:
    return None if text in ("", "N/A") else float(text)


if __name__ == "__main__":
    sys.exit(main())
