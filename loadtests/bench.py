"""One benchmark run of the admission server and the compiled hot paths.

    python -m loadtests.bench [--connections 8] [--duration 15] [--rounds 3] [--workers-scan 1,2]

Serves three endpoints from the same stack (``gpustack-operator worker`` over TLS with file
lookups): ``/null`` decodes and answers an AdmissionReview (the ceiling of the stack), the Pod
webhook and the ModelDeployment webhook; drives each with the same client (``wrk``, a C load
generator, one thread) at the same concurrency with the realistic mix of ``loadtests.mix``; then
times each ``fastpath`` module compiled against its interpreted source.  Prints a table and, last,
one JSON line.  It asserts nothing: figures are for reading.

When the ``make dev`` control plane is up (``--cluster-dir``, default ``.dev/cluster``), the same
Pod reviews are also sent, by the same client and interleaved with ours, to Kueue's own Pod
webhooks (Go, controller-runtime) served by that cluster's Kueue, and each serving process's CPU
time is measured, so the JSON line carries requests per CPU-second of both and their ratios
(``vs_kueue_mutate_per_cpu``, ``vs_kueue_validate_per_cpu``).

The load generator is not the bottleneck when the server process uses (close to) a whole core
while wrk uses a fraction of the other: both CPU shares are measured and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from loadtests import mix, series
from tests.cluster.ports import port as fixed_port

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
POD_PATH = "/validate-gpustack-worker-core-v1-pod"
POD_MUTATE_PATH = "/mutate-gpustack-worker-core-v1-pod"
MD_PATH = "/validate-gpustack-worker-worker-gpustack-ai-v1-modeldeployment"
KUEUE_MUTATE_PATH = "/mutate--v1-pod"  # controller-runtime's paths for Kueue's core Pod webhooks
KUEUE_VALIDATE_PATH = "/validate--v1-pod"

_LUA = """
local bodies = {}
local i = 0
function init(args)
  for _, path in ipairs(args) do
    local f = io.open(path, "rb"); bodies[#bodies + 1] = f:read("*a"); f:close()
  end
end
request = function()
  i = (i % #bodies) + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[i])
end
"""


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its live children (uvicorn workers), in seconds."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


@dataclass(frozen=True)
class Kueue:
    """Kueue's webhook server in a running local control plane."""

    port: int
    pid: int

    @classmethod
    def find(cls, state_dir: Path) -> Kueue | None:
        env_file, pid_file = state_dir / "cluster.env", state_dir / "pids" / "kueue.pid"
        if not env_file.is_file() or not pid_file.is_file():
            return None
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, 0)
        except (ValueError, OSError):
            return None
        kueue = cls(int(env["KUEUE_WEBHOOK_PORT"]), pid)
        # Kueue reads the Pod's namespace (managedJobsNamespaceSelector): it must exist there.
        kubectl = Path(env["BIN_DIR"]) / "kubectl"
        manifest = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": mix.NAMESPACE}})
        subprocess.run(
            [str(kubectl), "--kubeconfig", env["KUBECONFIG"], "apply", "-f", "-"],
            input=manifest,
            text=True,
            capture_output=True,
            check=True,
        )
        return kueue


def _latency_ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


class Server:
    def __init__(self, objects: Path, certs: Path, port: int, workers: int) -> None:
        self.port = port
        self.log = (certs.parent / f"server-{workers}.log").open("wb")
        self.process = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "gpustack_operator",
                "worker",
                "--webhooks-only",
                "--objects",
                str(objects),
                "--cert-dir",
                str(certs),
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(port),
                "--null-endpoint",
                "--workers",
                str(workers),
            ],
            cwd=REPO,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"server did not start; see {self.log.name}")

    def stop(self) -> None:
        os.killpg(self.process.pid, 15)
        self.process.wait(20)


def _wrk(url: str, bodies: list[Path], lua: Path, connections: int, duration: int, server_pid: int) -> dict:
    before_server = _cpu_seconds(server_pid)
    before_client = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "-s",
            str(lua),
            url,
            "--",
            *map(str, bodies),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.monotonic() - started
    after_client = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = _cpu_seconds(server_pid) - before_server
    client_cpu = (after_client.ru_utime - before_client.ru_utime) + (
        after_client.ru_stime - before_client.ru_stime
    )
    out = result.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    dist = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": rps,
        "p50_ms": _latency_ms(dist["50"]),
        "p90_ms": _latency_ms(dist["90"]),
        "p99_ms": _latency_ms(dist["99"]),
        "non_2xx": int(errors.group(1)) if errors else 0,
        "server_cpu": server_cpu / elapsed,
        "client_cpu": client_cpu / elapsed,
        "per_cpu_second": rps * elapsed / server_cpu if server_cpu > 0 else 0.0,
    }


def _median(runs: list[dict]) -> dict:
    """Each figure's median over the passes (the middle pass by throughput for an odd count)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def _check_answers(port: int, certs: Path, path: str, bodies: list[Path]) -> list[bool]:
    """Every body of the mix gets a well-formed answer; returns the allowed flags."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    allowed = []
    for body in bodies:
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}{path}",
            data=body.read_bytes(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            answer = json.loads(response.read())["response"]
        if not answer["allowed"] and answer["status"]["code"] >= 500:
            raise RuntimeError(f"{path}: {body.name} got an internal error: {answer['status']['message']}")
        allowed.append(answer["allowed"])
    return allowed


def _write_bodies(directory: Path, kind: str) -> list[Path]:
    paths = []
    for index, body in enumerate(mix.bodies(kind)):
        path = directory / f"{kind}-{index}.json"
        path.write_bytes(body)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections (default 8)")
    parser.add_argument(
        "--duration", type=int, default=15, help="seconds per endpoint, over all rounds (default 15)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved passes per endpoint (medians)")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=None,
        help="seconds of unmeasured load before each endpoint's passes (default: one pass, 1-2 s; "
        "0: none, for smoke runs)",
    )
    parser.add_argument("--port", type=int, default=fixed_port("bench-worker"))
    parser.add_argument(
        "--workers-scan", default="1,2", help="uvicorn worker counts to measure the Pod webhook with"
    )
    parser.add_argument(
        "--cluster-dir",
        type=Path,
        default=REPO / ".dev" / "cluster",
        help="a running local control plane whose Kueue to compare with (default .dev/cluster)",
    )
    parser.add_argument("--skip-speedups", action="store_true", help="leave out the fastpath timings")
    parser.add_argument(
        "--quick-speedups", action="store_true", help="time the fastpath speedups briefly (smoke runs)"
    )
    series.add_argument(parser)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("loadtests.bench needs wrk (Debian package wrk): apt-get install -y wrk", file=sys.stderr)
        return 2
    from certs import issue

    work = Path(tempfile.mkdtemp(prefix="gpustack-bench-"))
    objects = mix.write_objects(work / "objects")
    certs = work / "certs"
    issue.ensure(certs, ["localhost"], ["127.0.0.1"])
    lua = work / "mix.lua"
    lua.write_text(_LUA)
    pod_bodies = _write_bodies(work, "pod")
    md_bodies = _write_bodies(work, "md")

    results: dict[str, dict] = {}
    kueue = Kueue.find(args.cluster_dir)
    if kueue is None:
        print(f"(no running control plane at {args.cluster_dir}: Kueue's webhooks are not compared)")
    server = Server(objects, certs, args.port, 1)
    try:
        pod_allowed = _check_answers(args.port, certs, POD_PATH, pod_bodies)
        md_allowed = _check_answers(args.port, certs, MD_PATH, md_bodies)
        base = f"https://127.0.0.1:{args.port}"
        pid = server.process.pid
        endpoints = [
            ("null", base + "/null", pod_bodies, pid),
            ("pod", base + POD_PATH, pod_bodies, pid),
            ("pod_mutate", base + POD_MUTATE_PATH, pod_bodies, pid),
            ("md", base + MD_PATH, md_bodies, pid),
        ]
        if kueue is not None:
            peer = f"https://127.0.0.1:{kueue.port}"
            endpoints += [
                ("kueue_validate", peer + KUEUE_VALIDATE_PATH, pod_bodies, kueue.pid),
                ("kueue_mutate", peer + KUEUE_MUTATE_PATH, pod_bodies, kueue.pid),
            ]
        warm_up = (
            max(1, min(2, args.duration // max(1, args.rounds))) if args.warm_up is None else args.warm_up
        )
        for _, url, bodies, target in endpoints if warm_up else ():
            _wrk(url, bodies, lua, args.connections, warm_up, target)
        # Interleaved rounds, medians per endpoint: a 2-core machine drifts over a run, and drift
        # would otherwise land on whichever endpoint happened to run during it.
        passes: dict[str, list[dict]] = {name: [] for name, _, _, _ in endpoints}
        for _ in range(args.rounds):
            for name, url, bodies, target in endpoints:
                passes[name].append(
                    _wrk(url, bodies, lua, args.connections, max(1, args.duration // args.rounds), target)
                )
        results = {name: _median(runs) for name, runs in passes.items()}
        # One connection: each request alone on the server, so the percentiles are the time to
        # answer one review, where with --connections callers at once they are mostly the queue
        # (the mean latency of a saturated closed loop is connections / throughput).
        alone: dict[str, list[dict]] = {name: [] for name in ("null", "pod", "md")}
        for _ in range(args.rounds):
            for name, url, bodies, target in endpoints:
                if name in alone:
                    alone[name].append(
                        _wrk(url, bodies, lua, 1, max(1, args.duration // args.rounds), target)
                    )
        one_connection = {name: _median(runs) for name, runs in alone.items()}
    finally:
        server.stop()

    scaling = {}
    for workers in [int(w) for w in args.workers_scan.split(",") if w]:
        server = Server(objects, certs, args.port, workers)
        try:
            url = f"https://127.0.0.1:{args.port}{POD_PATH}"
            if warm_up:
                _wrk(url, pod_bodies, lua, args.connections, warm_up, server.process.pid)
            scaling[workers] = _wrk(url, pod_bodies, lua, args.connections, args.duration, server.process.pid)
        finally:
            server.stop()

    from loadtests import bench_fastpath
    from loadtests.bench_argv import bench_argv
    from loadtests.bench_fastpath import bench_fit, bench_quantity, bench_requests

    if args.quick_speedups:
        bench_fastpath.configure(1, 0.01)

    speedups = (
        {}
        if args.skip_speedups
        else {
            "argv": bench_argv(2, 1) if args.quick_speedups else bench_argv(),
            "fit": bench_fit(),
            "requests": bench_requests(),
            "quantity": bench_quantity(),
        }
    )

    print(
        f"wrk -t1 -c{args.connections}, {args.rounds} interleaved passes of "
        f"{max(1, args.duration // args.rounds)}s per endpoint (medians), TLS, one uvicorn worker; "
        f"mix: {len(pod_bodies)} Pod reviews ({pod_allowed.count(False)} refused), "
        f"{len(md_bodies)} ModelDeployment reviews ({md_allowed.count(False)} refused)"
    )
    print(
        f"{'endpoint':<12}{'req/s':>10}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'non-2xx':>9}"
        f"{'server CPU':>12}{'wrk CPU':>10}{'req/CPU-s':>11}"
    )
    for name, r in results.items():
        print(
            f"{name:<12}{r['rps']:>10.0f}{r['p50_ms']:>9.2f}{r['p90_ms']:>9.2f}{r['p99_ms']:>9.2f}"
            f"{r['non_2xx']:>9}{r['server_cpu']:>11.0%}{r['client_cpu']:>10.0%}{r['per_cpu_second']:>11.0f}"
        )
    print("\nOne connection (each review alone on the server):")
    for name, r in one_connection.items():
        print(f"  {name:<10}{r['rps']:>8.0f} req/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")
    print("\nPod webhook by uvicorn worker processes:")
    for workers, r in scaling.items():
        print(
            f"  workers={workers}: {r['rps']:.0f} req/s, p99 {r['p99_ms']:.2f} ms, server CPU "
            f"{r['server_cpu']:.0%}, wrk CPU {r['client_cpu']:.0%}"
        )
    print("\nfastpath, compiled vs interpreted (same inputs):")
    for name, s in speedups.items():
        print(f"  {name:<9} {s['speedup']:.1f}x")
    summary = {
        "null_rps": round(results["null"]["rps"]),
        "pod_rps": round(results["pod"]["rps"]),
        "pod_p50_ms": round(results["pod"]["p50_ms"], 3),
        "pod_p99_ms": round(results["pod"]["p99_ms"], 3),
        "pod_vs_null": round(results["pod"]["rps"] / results["null"]["rps"], 3),
        "pod_mutate_rps": round(results["pod_mutate"]["rps"]),
        "md_rps": round(results["md"]["rps"]),
        "md_p99_ms": round(results["md"]["p99_ms"], 3),
        **{f"{name}_speedup": round(s["speedup"], 1) for name, s in speedups.items()},
        "connections": args.connections,
        "server_cpu_pod": round(results["pod"]["server_cpu"], 2),
        "wrk_cpu_pod": round(results["pod"]["client_cpu"], 2),
        "workers_rps": {str(w): round(r["rps"]) for w, r in scaling.items()},
        "pod_per_cpu_second": round(results["pod"]["per_cpu_second"]),
        "pod_mutate_per_cpu_second": round(results["pod_mutate"]["per_cpu_second"]),
        # What the queue of --connections callers adds to a review's latency: its mean is
        # connections / throughput, whatever the handler does (Little's law).
        "md_queue_mean_ms": round(1000 * args.connections / results["md"]["rps"], 3),
        "one_connection": {
            name: {"rps": round(r["rps"]), "p50_ms": round(r["p50_ms"], 3), "p99_ms": round(r["p99_ms"], 3)}
            for name, r in one_connection.items()
        },
    }
    if kueue is not None:
        ours = {"validate": results["pod"], "mutate": results["pod_mutate"]}
        for verb in ("validate", "mutate"):
            peer = results[f"kueue_{verb}"]
            summary[f"kueue_{verb}_rps"] = round(peer["rps"])
            summary[f"kueue_{verb}_p99_ms"] = round(peer["p99_ms"], 3)
            summary[f"kueue_{verb}_per_cpu_second"] = round(peer["per_cpu_second"])
            summary[f"vs_kueue_{verb}_rps"] = round(ours[verb]["rps"] / peer["rps"], 3)
            summary[f"vs_kueue_{verb}_per_cpu"] = round(
                ours[verb]["per_cpu_second"] / peer["per_cpu_second"], 3
            )
    print(json.dumps(summary))
    rows = [{"endpoint": name, "connections": args.connections, **r} for name, r in results.items()]
    series.write(args.series_out, "bench", [*rows, summary])
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
