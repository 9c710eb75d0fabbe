"""Benchmark of the device manager: gate 5's gRPC calls and the discovery pass.

    python -m loadtests.bench_devicemanager                       # full size
    python -m loadtests.bench_devicemanager --allocations 8 --concurrency 2 --stress-allocations 8 \
        --discovery-cards 2 --repeat 1 --nics 2 --vfs 2           # smoke
    python -m loadtests.bench_devicemanager --series-out .dev/bench-series   # for make bench-report

- ``allocate`` / ``preferred`` / ``admission``: ``Allocate`` and ``GetPreferredAllocation`` of the
  sliced resource over real gRPC on unix sockets, from one caller that admits ``--allocations``
  (100) Pods one after the other (the kubelet's shape: it admits one Pod at a time), against one
  node of ``--cards`` (8) simulated H100s with as many pending sliced Pods as allocations;
  ``admission`` is the two calls of each Pod together.  The annotation write is left out (the
  recorder is a no-op), as the target states.  The device plugins run in a process of their own, as
  in production.  The kubelet's side is a Go program, as the kubelet is
  (``tests/cluster/kube/benchcmd/dm-kubelet``, built once into ``~/.cache``): it keeps a
  ``ListAndWatch`` stream open on every resource, offers the healthy unallocated devices, makes the
  calls, and serves the pod-resources API the plugins identify containers through (the Pods being
  admitted without devices, the admitted ones with theirs).
- ``*-started``: the same, each granted Pod reported ``Running`` by the watch before the caller
  admits the next (``-gap``): nothing is left to retry, so the preference does not need the
  kubelet's answer and the ask runs ahead of the ``Allocate``, on a thread of its own.
- ``*-floor``: the same calls from the same caller against plugin servers whose handlers do nothing
  of ours (the preference answers the first offered ids, ``Allocate`` one environment variable): what
  Python gRPC itself costs per grant, the least any handler of ours can add to.
- ``*-stress``: ``--concurrency`` (8) callers at once admitting ``--stress-allocations`` (400)
  Pods: a stress figure (no kubelet calls this way), not a target.
- ``discovery``: one NVML detection pass through pynvml's real wrappers on the simulated library,
  for each card count of ``--discovery-cards`` (8 and 64).
- ``interfaces``: one RDMA interface pass (the confined sysfs reads and a netlink dump of this
  namespace) over a simulated tree of ``--nics`` (8) SR-IOV NICs with ``--vfs`` (8) VFs each.

Prints one JSON object per line: the case, the number of calls, and p50/p99/max milliseconds (for
the gRPC calls as the caller sees them, and ``plugin_p50_ms``/``plugin_p99_ms`` from the moment the
plugin's handler runs).
Target (issue 34): ``Allocate`` with one caller, p99 under 2 ms as the caller sees it.
"""

from __future__ import annotations

import argparse
import json
import queue
import resource as rusage
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from api import allocation
from loadtests import gobuild, series
from nodeplugins.devicemanager import devices, tokens
from nodeplugins.devicemanager.allocator import Allocator
from nodeplugins.devicemanager.backends import backend_for
from nodeplugins.devicemanager.backends.nvidia import NvidiaBackend
from nodeplugins.devicemanager.backends.simulated import inventory_of
from nodeplugins.devicemanager.kubelet import PodResources
from nodeplugins.devicemanager.plugin import DevicePlugin, Watchers, pb, pb_grpc
from nodeplugins.devicemanager.rdma.inventory import Interfaces
from nodeplugins.devicemanager.rdma.sysfs import Sysfs
from nodeplugins.devicemanager.simulation import profile as profiles
from nodeplugins.devicemanager.simulation.sysfs import SysfsTree

NODE = "bench-node"
PRODUCT = "NVIDIA H100 80GB HBM3"
BASE = "nvidia.com/gpu"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(case: str, samples: list[float], **extra: Any) -> dict[str, Any]:
    ms = [s * 1000 for s in samples]
    return {
        "case": case,
        "calls": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(_pct(ms, 0.99), 3),
        "max_ms": round(max(ms), 3),
        **extra,
    }


def _pods(count: int) -> list[dict[str, Any]]:
    limits = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 16_000}  # 1 % slices: many fit per card
    return [
        {
            "metadata": {
                "name": f"p{i}",
                "namespace": "bench",
                "uid": f"uid-{i}",
                "creationTimestamp": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
            },
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "main", "resources": {"limits": dict(limits)}}],
            },
            "status": {"phase": "Pending"},
        }
        for i in range(count)
    ]


def _serve(argv: list[str]) -> int:
    """The device-plugin process: every resource's plugin on its socket in ``directory``, the
    allocator identifying containers through the pod-resources socket there; stops when stdin
    closes and prints how many containers it holds and the CPU seconds it spent meanwhile."""
    directory, cards, allocations, identify = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    if identify == "floor":
        return _serve_floor(directory, cards)
    profile = profiles.parse(
        {"manufacturer": "nvidia", "cards": [{"product": PRODUCT, "count": cards}]}, node=NODE
    )
    inventory = inventory_of(profile)
    asks = identify in ("pod-resources", "started")
    kubelet = PodResources(directory / "pr.sock") if asks else None
    allocator = Allocator(NODE, "nvidia", env={}, pod_resources=kubelet.waiting if kubelet else None)
    allocator.set_inventory(inventory, devices.spec_groups(inventory, {}))
    allocator.replace_pods(_pods(allocations))
    watchers = Watchers()
    watchers.follow(allocator)
    servers = []
    served: dict[str, list[float]] = {"allocate": [], "preferred": []}
    record = _started(allocator) if identify == "started" else lambda _held: None
    for resource in tokens.resources("nvidia"):
        plugin = _Timed(resource, allocator, NvidiaBackend(), record, watchers)
        plugin.served = served
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb_grpc.add_DevicePluginServicer_to_server(plugin, server)
        server.add_insecure_port(f"unix://{directory / resource.socket}")
        server.start()
        servers.append(server)
    print("serving", flush=True)
    started = rusage.getrusage(rusage.RUSAGE_SELF)
    sys.stdin.read()
    ended = rusage.getrusage(rusage.RUSAGE_SELF)
    cpu = ended.ru_utime + ended.ru_stime - started.ru_utime - started.ru_stime
    watchers.close()
    for server in servers:
        server.stop(0)
    print(json.dumps({"held": len(allocator.held), "cpu_s": cpu, **served}), flush=True)
    return 0


def _started(allocator: Allocator) -> Any:
    """A recorder for the ``started`` case: each granted Pod comes back from the watch a moment
    later with its record and ``Running``, on a thread of its own, as once its container started
    (the annotation write itself stays out of the figures)."""
    granted: queue.Queue[Any] = queue.Queue()

    def deliver() -> None:
        while (held := granted.get()) is not None:
            time.sleep(0.002)  # the write, the watch event
            pod = allocator.pods[held.uid]
            record = allocation.record_of(pod)
            record[held.container] = held.groups
            annotations = {allocation.ANNOTATION: allocation.encode(record)}
            metadata = {**pod["metadata"], "annotations": annotations}
            allocator.pod_event("MODIFIED", {**pod, "metadata": metadata, "status": {"phase": "Running"}})

    threading.Thread(target=deliver, name="watch", daemon=True).start()
    return granted.put


def _serve_floor(directory: Path, cards: int) -> int:
    """The transport alone: every resource's socket served by Python gRPC as ``_serve`` does, with
    handlers that touch no allocator (one healthy list, the first offered ids, an echo)."""
    ids = [f"GPU-{card:04d}-slice-{n}" for card in range(cards) for n in range(125)]
    served: dict[str, list[float]] = {"allocate": [], "preferred": []}
    stop = threading.Event()

    class Floor(pb_grpc.DevicePluginServicer):  # type: ignore[misc,name-defined]
        def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
            return pb.DevicePluginOptions(get_preferred_allocation_available=True)

        def ListAndWatch(self, request: Any, context: Any) -> Any:
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health="Healthy") for i in ids])
            while context.is_active() and not stop.wait(1.0):
                pass

        def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
            start = time.perf_counter()
            out = pb.PreferredAllocationResponse()
            for want in request.container_requests:
                first = list(want.available_deviceIDs)[: want.allocation_size]
                out.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=first))
            served["preferred"].append(time.perf_counter() - start)
            return out

        def Allocate(self, request: Any, context: Any) -> Any:
            start = time.perf_counter()
            out = pb.AllocateResponse()
            for want in request.container_requests:
                envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(want.devices_ids)}
                out.container_responses.append(pb.ContainerAllocateResponse(envs=envs))
            served["allocate"].append(time.perf_counter() - start)
            return out

    servers = []
    for resource in tokens.resources("nvidia"):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb_grpc.add_DevicePluginServicer_to_server(Floor(), server)
        server.add_insecure_port(f"unix://{directory / resource.socket}")
        server.start()
        servers.append(server)
    print("serving", flush=True)
    started = rusage.getrusage(rusage.RUSAGE_SELF)
    sys.stdin.read()
    ended = rusage.getrusage(rusage.RUSAGE_SELF)
    cpu = ended.ru_utime + ended.ru_stime - started.ru_utime - started.ru_stime
    stop.set()
    for server in servers:
        server.stop(0)
    print(json.dumps({"held": len(served["allocate"]), "cpu_s": cpu, **served}), flush=True)
    return 0


class _Timed(DevicePlugin):
    """The plugin, timing each call from the moment its handler runs (the plugin-side latency:
    what the caller's side adds — its own process, the socket — is left out)."""

    served: dict[str, list[float]]

    def Allocate(self, request: Any, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return super().Allocate(request, context)
        finally:
            self.served["allocate"].append(time.perf_counter() - start)

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return super().GetPreferredAllocation(request, context)
        finally:
            self.served["preferred"].append(time.perf_counter() - start)


KUBE_MODULE = Path(__file__).resolve().parents[1] / "tests" / "cluster" / "kube"
STAND_IN = "benchcmd/dm-kubelet"


def stand_in_binary() -> Path:
    """The kubelet's side of the calls (``tests/cluster/kube/benchcmd/dm-kubelet``, Go, from the
    pins of the kube module), built once into ``~/.cache`` per content of its sources and pins."""
    return gobuild.built(KUBE_MODULE, STAND_IN)


def bench_grpc(
    cards: int, allocations: int, concurrency: int, identify: str = "pod-resources"
) -> list[dict[str, Any]]:
    """``identify``: ``pod-resources`` (production: ask the kubelet), ``started`` (the same, each
    granted Pod reported ``Running`` by the watch before the next is admitted: nothing is left to
    retry, so a preference does not need the kubelet and the ask runs ahead of the ``Allocate``),
    ``pending`` (the allocator's fallback from the pending Pods alone, what it costs without the
    kubelet's answer) or ``floor`` (no allocator: handlers that do nothing of ours, what Python gRPC
    costs by itself)."""
    resource = next(r for r in tokens.resources("nvidia") if r.family == "sliced")
    binary = stand_in_binary()
    directory = Path(tempfile.mkdtemp(prefix="dmb", dir="/tmp"))
    command = "import sys; from loadtests.bench_devicemanager import _serve; sys.exit(_serve(sys.argv[1:]))"
    plugins = subprocess.Popen(
        [sys.executable, "-c", command, str(directory), str(cards), str(allocations), identify],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert plugins.stdout is not None and plugins.stdin is not None
    try:
        if plugins.stdout.readline().strip() != "serving":
            raise RuntimeError("the device-plugin process did not start")
        kubelet = subprocess.run(
            [
                str(binary),
                f"-dir={directory}",
                f"-resource={resource.name}",
                f"-socket={resource.socket}",
                "-watch=" + ",".join(r.socket for r in tokens.resources("nvidia")),
                f"-pods={allocations}",
                f"-concurrency={concurrency}",
                f"-gap={'10ms' if identify == 'started' else '0s'}",  # the watch's Running first
                "-namespace=bench",
                "-prefix=p",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        calls = json.loads(kubelet.stdout)
    finally:
        out, _ = plugins.communicate("", timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
    served = json.loads(out.strip().splitlines()[-1])
    failures = calls["refusals"]

    def plugin_side(case: str) -> dict[str, float]:
        ms = [x * 1000 for x in served[case]] or [0.0]
        return {"plugin_p50_ms": round(statistics.median(ms), 3), "plugin_p99_ms": round(_pct(ms, 0.99), 3)}

    extra = {
        "cards": cards,
        "concurrency": concurrency,
        "held": served["held"],
        "refused": len(failures),
        "first_refusal": failures[0] if failures else "",
        "annotation_write": False,
        "identify": identify,
        # the plugins' process: CPU per grant (its preference and Allocate, ListAndWatch, the asks)
        "plugin_cpu_ms_per_grant": round(served["cpu_s"] * 1000 / max(1, served["held"]), 3),
        "caller": "Go (the kubelet's side, tests/cluster/kube/benchcmd/dm-kubelet)",
    }
    # The caller appends both calls of a Pod under one lock: the i-th of each are one admission.
    both = [p + a for p, a in zip(calls["preferred_s"], calls["allocate_s"], strict=True)]
    return [
        _summary("preferred", calls["preferred_s"] or [0.0], **extra, **plugin_side("preferred")),
        _summary("allocate", calls["allocate_s"] or [0.0], **extra, **plugin_side("allocate")),
        _summary("admission", both or [0.0], **extra),
    ]


def bench_discovery(cards: int, repeat: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="dmd"))
    try:
        path = directory / "node.yaml"
        path.write_text(
            json.dumps({"manufacturer": "nvidia", "cards": [{"product": PRODUCT, "count": cards}]})
        )
        backend = backend_for("nvidia", simulate=path, node=NODE)
        backend.discover()  # warm: imports, first library install
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            inventory = backend.discover()
            samples.append(time.perf_counter() - start)
        assert len(inventory.cards) == cards
        return _summary("discovery", samples, cards=cards, source="fake NVML under pynvml")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def bench_interfaces(nics: int, vfs: int, repeat: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="dmi"))
    try:
        tree = SysfsTree(directory)
        for n in range(nics):
            bridge = f"0000:{n * 2:02x}:01.0"
            tree.bridge(bridge, numa=n % 2)
            address = f"0000:{n * 2 + 1:02x}:00.0"
            tree.nic(f"ens{n}f0", address, under=bridge, numa=n % 2, rdma=f"mlx5_{n * (vfs + 1)}")
            tree.sriov(address)
            for v in range(vfs):
                tree.vf(
                    address,
                    f"0000:{n * 2 + 1:02x}:{v + 1:02x}.0",
                    name=f"ens{n}f0v{v}",
                    rdma=f"mlx5_{n * (vfs + 1) + v + 1}",
                )
        interfaces = Interfaces(Sysfs(directory))
        samples = []
        for _ in range(repeat + 1):
            interfaces.recorded = None  # measure the whole pass, comparison included
            start = time.perf_counter()
            interfaces.refresh()
            samples.append(time.perf_counter() - start)
        assert len(interfaces.current()) == nics
        return _summary("interfaces", samples[1:], nics=nics, vfs=vfs, source="simulated sysfs + netlink")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument(
        "--allocations", type=int, default=100, help="Pods the one caller admits, one after the other"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="callers of the stress figure (0: no stress figure)"
    )
    parser.add_argument("--stress-allocations", type=int, default=400, help="Pods the stress callers admit")
    parser.add_argument("--discovery-cards", default="8,64")
    parser.add_argument("--repeat", type=int, default=20, help="discovery passes per card count")
    parser.add_argument("--nics", type=int, default=8, help="SR-IOV NICs of the interface pass")
    parser.add_argument("--vfs", type=int, default=8, help="VFs per NIC of the interface pass")
    series.add_argument(parser)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []

    def emit(line: dict[str, Any]) -> None:
        print(json.dumps(line), flush=True)
        rows.append(line)

    for line in bench_grpc(args.cards, args.allocations, 1):
        emit(line)
    for line in bench_grpc(args.cards, args.allocations, 1, "started"):
        emit({**line, "case": f"{line['case']}-started"})
    for line in bench_grpc(args.cards, args.allocations, 1, "floor"):
        emit({**line, "case": f"{line['case']}-floor"})
    if args.concurrency > 0:
        for line in bench_grpc(args.cards, args.stress_allocations, args.concurrency):
            emit({**line, "case": f"{line['case']}-stress"})
    for count in (int(n) for n in args.discovery_cards.split(",") if n):
        emit(bench_discovery(count, args.repeat))
    emit(bench_interfaces(args.nics, args.vfs, args.repeat))
    series.write(args.series_out, "bench_devicemanager", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
