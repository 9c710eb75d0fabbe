"""Benchmark of model delivery on this machine (model-delivery issue, item 7). Prints JSON lines.

    python -m loadtests.bench_delivery [--size-mib 512] [--files 4] [--rounds 3] [--publishes 200]

1. **Download throughput** from the local hub (``tests.hub``) through the plugin's materializer —
   node-wide request limit, parallel ranges, sha256 / git-blob verification while streaming,
   checkpoints, fsync and atomic publication — as a ratio to a plain single-stream copy of the same
   bytes from the same hub on the same machine (one GET per file, written to disk and synced,
   nothing verified). Rounds alternate the two and the medians are compared (target ≥ 0.8); each
   round's own ratio, the CPU seconds per GiB of each path and the load average are printed too,
   since on a shared machine the wall ratio follows whatever else runs.
2. **Cached NodePublishVolume**: the time of ``publish`` for a published digest — authorization,
   one stat, the reference recorded (and synced) before the bind, bind + read-only remount — in a
   private mount namespace (``unshare -m``; skipped with a reason when that is not permitted).
   Median and p95 over ``--publishes`` targets (target: under 10 ms).

It asserts nothing: figures are for reading.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from modelhub import huggingface as hf
from modelhub.connection import HubConnection
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.capacity import Usage, Watermarks, usage_of
from nodeplugins.modelmanager.config import PluginConfig
from nodeplugins.modelmanager.download import Limits, Tuning
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.materialize import Materializer, Published, Request
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit
from tests.hub.repos import write_random
from tests.hub.server import HubServer

REPO_ID = "bench/weights"
CHUNK = 1 << 20


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


class _RootCapacity:
    def __init__(self, root: Path) -> None:
        self.root = root

    def usage(self) -> Usage:
        return usage_of(self.root)

    def watermarks(self) -> Watermarks:
        return Watermarks(99, 98)

    def collect_for(self, digest: str, need: int) -> None:
        return None


def build_repo(hub: HubServer, work: Path, size_mib: int, files: int) -> None:
    hub.repos.create(REPO_ID)
    contents: dict[str, Any] = {"config.json": b'{"bench": true}\n'}
    per = max((size_mib << 20) // files, 1)
    for index in range(files):
        contents[f"model-{index:05d}-of-{files:05d}.safetensors"] = write_random(
            work / f"src-{index}", per, seed=index
        )
    hub.repos.commit(REPO_ID, contents)


def plain_copy(hub: HubServer, commit: str, paths: list[str], dest: Path) -> int:
    """One GET per file (the LFS redirect followed), written as it arrives, nothing verified."""
    total = 0
    dest.mkdir(parents=True, exist_ok=True)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    for path in paths:
        url = f"{hub.endpoint}/{REPO_ID}/resolve/{commit}/{path}"
        for _ in range(3):
            parts = urlsplit(url)
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=60)
            conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
            response = conn.getresponse()
            if response.status in (301, 302, 303, 307, 308):
                url = urljoin(url, response.getheader("Location") or "")
                response.read()
                conn.close()
                continue
            with open(dest / path.replace("/", "_"), "wb") as out:
                while n := response.readinto(view):
                    out.write(view[:n])
                    total += n
                out.flush()
                os.fsync(out.fileno())
            conn.close()
            break
    return total


def materialize(hub: HubServer, root: Path, request: Request, concurrency: int) -> float:
    layout = Layout(root)
    cache = NodeCache(layout)
    config = PluginConfig(1, 99, 98, concurrency, 0, HubConnection(hub.endpoint))
    materializer = Materializer(
        cache,
        Limits(RequestLimit(concurrency), ByteRate(0)),
        lambda: config,
        _RootCapacity(root),
        tuning=Tuning(),
    )
    started = time.perf_counter()
    materializer.ensure(request)
    materializer.wait(request.digest)
    elapsed = time.perf_counter() - started
    if not isinstance(materializer.ensure(request), Published):
        failure = cache.ledger.failures.get(request.digest)
        raise SystemExit(f"materialization failed: {failure}")
    return elapsed


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_download(size_mib: int, files: int, rounds: int, concurrency: int) -> dict[str, Any]:
    """Rounds alternate the plain copy and the materialization; wall medians give the ratio, and
    the process's CPU seconds per GiB (the hub serves from this process too, for both) say how
    much of a busy machine each path needs."""
    work = Path(tempfile.mkdtemp(prefix="bench-delivery-"))
    load_before = os.getloadavg()[0]
    try:
        with HubServer(work / "hub") as hub:
            build_repo(hub, work, size_mib, files)
            resolution = hf.resolve(HubConnection(hub.endpoint), REPO_ID, "main", None)
            request = Request(resolution.manifest.digest, REPO_ID, resolution.commit)
            paths = [f.path for f in resolution.manifest.files]
            size = resolution.manifest.size
            plain, verified, plain_cpu, verified_cpu = [], [], [], []
            for index in range(rounds):
                target = work / f"plain-{index}"
                os.sync()  # the last round's writeback and deletions land outside the timed copy
                cpu, started = _cpu(), time.perf_counter()
                copied = plain_copy(hub, resolution.commit, paths, target)
                plain.append(time.perf_counter() - started)
                plain_cpu.append(_cpu() - cpu)
                assert copied == size
                shutil.rmtree(target)
                root = work / f"cache-{index}"
                os.sync()
                cpu = _cpu()
                verified.append(materialize(hub, root, request, concurrency))
                verified_cpu.append(_cpu() - cpu)
                shutil.rmtree(root)
        plain_rate = size / statistics.median(plain) / (1 << 20)
        verified_rate = size / statistics.median(verified) / (1 << 20)
        per_gib = (1 << 30) / size
        return {
            "bench": "delivery_download",
            "bytes": size,
            "files": len(paths),
            "rounds": rounds,
            "concurrency": concurrency,
            "plain_mib_per_s": round(plain_rate, 1),
            "verified_mib_per_s": round(verified_rate, 1),
            "ratio": round(verified_rate / plain_rate, 3),
            "round_ratios": [round(p / v, 3) for p, v in zip(plain, verified, strict=True)],
            "target_ratio": 0.8,
            "plain_cpu_s_per_gib": round(statistics.median(plain_cpu) * per_gib, 2),
            "verified_cpu_s_per_gib": round(statistics.median(verified_cpu) * per_gib, 2),
            "cpus": os.cpu_count(),
            "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


_PUBLISH = r"""
import json, statistics, sys, time
from pathlib import Path
from api import delivery as d
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.publish import NodeService, PublishRequest
from api.manifest import Manifest, ManifestFile

work, count = Path(sys.argv[1]), int(sys.argv[2])
layout = Layout(work / "cache")
cache = NodeCache(layout)
manifest = Manifest.of([ManifestFile("config.json", 3, "gitsha1", "0" * 40)])
layout.begin(manifest.digest, manifest)
(layout.partial_model(manifest.digest) / "config.json").write_bytes(b"{}\n")
layout.publish(manifest.digest, manifest)
artifact = {"metadata": {"name": "a", "namespace": "ns", "uid": "u"},
            "spec": {"source": {"huggingFace": {"repository": "x/y"}}},
            "status": {"resolved": {"manifestDigest": manifest.digest}, "conditions": [{"type": "Resolved", "status": "True"}]}}

class Artifacts:
    def synced(self): return True
    def get(self, name, namespace=""): return artifact if (namespace, name) == ("ns", "a") else None

kubelet = work / "kubelet"
service = NodeService(cache, None, Artifacts(), kubelet)
times = []
for i in range(count):
    target = kubelet / "pods" / f"p{i}" / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount"
    target.parent.mkdir(parents=True)
    request = PublishRequest(f"v{i}", str(target), {d.CSI_EPHEMERAL: "true", d.CSI_POD_NAMESPACE: "ns",
        d.ATTR_ARTIFACT: "a", d.ATTR_ARTIFACT_UID: "u", d.ATTR_MANIFEST_DIGEST: manifest.digest})
    started = time.perf_counter()
    service.publish(request)
    times.append(time.perf_counter() - started)
for i in range(count):
    service.unpublish(f"v{i}", str(kubelet / "pods" / f"p{i}" / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount"))
times.sort()
print(json.dumps({"median_ms": round(statistics.median(times) * 1000, 3),
                  "p95_ms": round(times[int(len(times) * 0.95) - 1] * 1000, 3), "publishes": count}))
"""


def bench_cached_publish(count: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    record: dict[str, Any] = {"bench": "delivery_cached_publish", "target_ms": 10}
    try:
        run = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                sys.executable,
                "-c",
                _PUBLISH,
                str(work),
                str(count),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=Path(__file__).resolve().parents[1],
        )
        if run.returncode != 0:
            record["skipped"] = (
                "no private mount namespace here: " + (run.stderr.strip().splitlines() or ["?"])[-1]
            )
        else:
            record.update(json.loads(run.stdout.strip().splitlines()[-1]))
    except FileNotFoundError:
        record["skipped"] = "unshare(1) is not installed"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["cpus"] = os.cpu_count()
    record["load"] = round(os.getloadavg()[0], 2)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512, help="bytes of weights, split over --files")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="download.concurrency")
    parser.add_argument("--publishes", type=int, default=200)
    args = parser.parse_args(argv)
    emit(bench_download(args.size_mib, args.files, args.rounds, args.concurrency))
    emit(bench_cached_publish(args.publishes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
