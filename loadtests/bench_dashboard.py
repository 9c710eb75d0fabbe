"""Benchmark of the worker-gateway's dashboard: a large simulated fleet's fleet page in a real browser.

    python -m loadtests.bench_dashboard                         # 10 clusters x 1,000 nodes
    python -m loadtests.bench_dashboard --clusters 2 --nodes 50 --loads 2 --seconds 5

The fleet is the gateway tests' simulation (tests/gateway/dashboard_objects.py) served by their fake
upstream (tests/gateway/fake_apiserver.py): per cluster ``--nodes`` managed 8-card H100 nodes with
their Devices inventories, a quarter of the cards whole-allocated to Pods, pending Workloads, a
ModelDeployment and an Instance.  The gateway runs as its own process (``gpustack-operator wg
--dashboard-address``) and subscribes every cluster; headless Chromium (scripts/ensure-chromium.sh)
then loads the fleet page ``--loads`` times.  Figures:

- ``fold_ms``: building the fleet document once, in this process, from the same objects;
- ``page_ms``: from navigation start to the fleet page rendered (the page's own ``performance.now()``
  when its first render ends), median and worst of the loads, with its fetch and render parts;
- ``gateway_cpu``: the gateway process's CPU time over ``--seconds`` with one page open, as a share
  of one core, idle (nothing changes) and under churn (one InstanceType's status changes every second,
  so every second a new revision is announced and the page reads the fleet again).

Prints one JSON line; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from gateway.dashboard import model
from tests.gateway import dashboard_objects as objs
from tests.gateway.browser import Chromium
from tests.gateway.fake_apiserver import FakeUpstream
from tests.net import free_port

REPO = Path(__file__).resolve().parent.parent


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _gateway(tmp: Path, upstream_port: int, dashboard_port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpustack_operator",
            "wg",
            "--bind-unix-path",
            str(tmp / "gw.sock"),
            "--worker-conn-gpustack-api-port",
            str(upstream_port),
            "--dashboard-address",
            f"127.0.0.1:{dashboard_port}",
        ],
        cwd=REPO,
        stdout=(tmp / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait(predicate, timeout: float, what: str, process: subprocess.Popen[bytes] | None = None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"bench_dashboard: the gateway exited ({process.returncode}) waiting for {what}")
        try:
            value = predicate()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise SystemExit(f"bench_dashboard: timed out waiting for {what}")


def fold_ms(clusters: int, nodes: int) -> float:
    states = []
    for c in range(clusters):
        by_kind: dict[str, list[dict]] = {}
        for obj in objs.cluster_objects(f"c{c:02d}", nodes, used=nodes * 2, pending=3):
            by_kind.setdefault(obj["kind"], []).append(obj)
        states.append(model.ClusterState(f"c{c:02d}", model.REACHABLE, objects=by_kind))
    started = time.perf_counter()
    model.fleet(states, 1, time.time())
    return (time.perf_counter() - started) * 1000


def run(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=1000, help="managed nodes per cluster")
    parser.add_argument("--loads", type=int, default=5, help="page loads to time")
    parser.add_argument("--seconds", type=float, default=30, help="each CPU window")
    args = parser.parse_args(argv)
    figures: dict = {"clusters": args.clusters, "nodes_per_cluster": args.nodes}
    figures["fold_ms"] = round(fold_ms(args.clusters, args.nodes), 1)
    upstream = FakeUpstream().start()
    names = [f"c{c:02d}" for c in range(args.clusters)]
    for name in names:
        cluster = upstream.cluster(name)
        cluster.served |= {"devices", "modeldeployments"}
        for obj in objs.cluster_objects(name, args.nodes, used=args.nodes * 2, pending=3):
            cluster.put(obj)
    tmp = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    port = free_port()
    gateway = _gateway(tmp, upstream.port, port)
    url = f"https://127.0.0.1:{port}/"
    try:
        api = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(tmp / "gw.sock"), verify=False),
            base_url="https://gpustack-operator",
            timeout=30,
        )
        page = httpx.Client(base_url=url, verify=False, timeout=60)
        _wait(lambda: api.get("/readyz").status_code == 200, 60, "the gateway", gateway)
        for name in names:
            api.post("/apis/workers", params={"cluster": name})
        started = time.monotonic()

        def complete() -> bool:
            doc = page.get("/api/fleet").json()
            return len(doc["clusters"]) == len(names) and all(
                t["nodes"]["total"] == args.nodes and len(t["accelerators"]) == 1 for t in doc["clusters"]
            )

        _wait(complete, 600, "every cluster listed", gateway)
        figures["sync_s"] = round(time.monotonic() - started, 1)
        time.sleep(3)  # let the last revision settle
        doc = page.get("/api/fleet")
        figures["fleet_json_bytes"] = len(doc.content)
        loads = []
        with Chromium() as browser:
            for _ in range(args.loads):
                if gateway.poll() is not None:
                    raise SystemExit(f"bench_dashboard: the gateway exited ({gateway.returncode})")
                browser.open(url)
                browser.wait("document.documentElement.dataset.readyMs", timeout=60, what="the fleet page")
                loads.append(
                    {
                        "page_ms": float(browser.evaluate("document.documentElement.dataset.readyMs")),
                        "fetch_ms": float(browser.evaluate("document.documentElement.dataset.fetchMs")),
                        "render_ms": float(browser.evaluate("document.documentElement.dataset.renderMs")),
                    }
                )
            tiles = browser.evaluate("document.querySelectorAll('.tile').length")
            figures["tiles_rendered"] = tiles
            figures["browser_errors"] = browser.errors
            for key in ("page_ms", "fetch_ms", "render_ms"):
                values = [load[key] for load in loads]
                figures[key] = {"median": round(statistics.median(values), 1), "max": round(max(values), 1)}
            # One page open: the gateway's CPU, idle, then under churn.
            browser.pump(2)
            before = _cpu_seconds(gateway.pid)
            browser.pump(args.seconds)
            idle = (_cpu_seconds(gateway.pid) - before) / args.seconds
            h100, _ = objs.pool_types(args.nodes, used=args.nodes * 2)
            cluster = upstream.clusters[names[0]]
            rendered = int(browser.evaluate("document.documentElement.dataset.rendered"))
            before = _cpu_seconds(gateway.pid)
            end = time.monotonic() + args.seconds
            tick = 0
            while time.monotonic() < end:
                tick += 1
                changed = json.loads(json.dumps(h100))
                changed["status"]["accelerator"]["remaining"] = str(args.nodes * 6 - tick % 7)
                cluster.put(changed)
                browser.pump(1.0)
            churn = (_cpu_seconds(gateway.pid) - before) / args.seconds
            figures["renders_under_churn"] = (
                int(browser.evaluate("document.documentElement.dataset.rendered")) - rendered
            )
            figures["changes_under_churn"] = tick
        figures["gateway_cpu"] = {"idle_core_share": round(idle, 3), "churn_core_share": round(churn, 3)}
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(30)
        upstream.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    print(json.dumps(run(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
