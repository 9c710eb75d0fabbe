"""``make dev`` / ``make dev-down``: the local control plane with simulated GPU nodes and the
worker, for a newcomer to ``kubectl apply`` the examples against.

    .venv/bin/python tests/cluster/dev.py up      # idempotent: a running setup is left as is
    .venv/bin/python tests/cluster/dev.py down

Simulated nodes (kwok): two with 8 × NVIDIA H100 80GB HBM3 each, one with 4 × NVIDIA A10G, carrying
the labels discovery would put there and the device-plugin capacity, with matching ``Devices``
ledgers.  The worker's controllers derive the pools, InstanceTypes and Kueue objects from them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import contextlib

import gpustack
import harness

from nodeplugins.devicemanager import simulated

DEV = harness.REPO_ROOT / ".dev"
NODES = (
    ("gpu-h100-0", "NVIDIA H100 80GB HBM3", 8),
    ("gpu-h100-1", "NVIDIA H100 80GB HBM3", 8),
    ("gpu-a10g-0", "NVIDIA A10G", 4),
)
TENANT = "team-a"
HUB_PORT = int(os.environ.get("GPUSTACK_HUB_PORT", "27648"))
HUB_PID = DEV / "hub.pid"


def _hub(info: harness.ClusterInfo) -> str:
    """The local hub (tests/hub) with its demo repositories; the Setting points resolution at it."""
    import subprocess
    import urllib.request

    endpoint = f"http://127.0.0.1:{HUB_PORT}"
    try:
        urllib.request.urlopen(endpoint + "/_hub/health", timeout=2).close()
    except OSError:
        log = (info.state_dir / "logs" / "hub.log").open("ab")
        process = subprocess.Popen(
            [
                gpustack.PYTHON,
                "-m",
                "tests.hub",
                "--root",
                str(DEV / "hub"),
                "--port",
                str(HUB_PORT),
                "--demo",
            ],
            cwd=harness.REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        HUB_PID.write_text(str(process.pid))
    info.apply(
        {
            "apiVersion": "gpustack.ai/v1",
            "kind": "Setting",
            "metadata": {
                "name": "model-artifact-huggingface-endpoint",
                "namespace": gpustack.SYSTEM_NAMESPACE,
            },
            "spec": {"value": endpoint},
        }
    )
    return endpoint


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.unlink()
    link.symlink_to(target)


def _simulated_node(info: harness.ClusterInfo, name: str, product_name: str, count: int) -> None:
    product = simulated.PRODUCTS[product_name]
    if info.kubectl("get", "node", name, check=False).returncode != 0:
        harness.create_fake_node(
            info,
            name,
            labels=simulated.node_labels(name, product, count),
            capacity=simulated.plugin_capacity(product, count),
        )
    if info.kubectl("get", "devices", name, check=False).returncode != 0:
        devices = simulated.devices(name, product, count)
        info.apply({k: v for k, v in devices.items() if k != "status"})
        info.kubectl(
            "patch",
            "devices",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": devices["status"]}),
        )


def up() -> int:
    started = time.monotonic()
    info = harness.start()
    op = gpustack.install(info)
    gpustack.ensure_namespace(info, TENANT)
    gpustack.start_worker(info, op)
    for name, product, count in NODES:
        _simulated_node(info, name, product, count)
    DEV.mkdir(exist_ok=True)
    hub = _hub(info)
    (DEV / "bin").mkdir(exist_ok=True)
    _link(info.kubeconfig, DEV / "kubeconfig")
    for binary in sorted(info.bin_dir.iterdir()):
        if binary.is_file() and os.access(binary, os.X_OK):
            _link(binary, DEV / "bin" / binary.name)
    deadline = time.monotonic() + 60
    types = []
    while time.monotonic() < deadline:
        types = info.kubectl_json("get", "instancetypes").get("items", [])
        if types and all((t.get("status") or {}).get("entrance") for t in types):
            break
        time.sleep(1)
    print(f"gpustack-operator dev cluster is up ({time.monotonic() - started:.0f}s).\n")
    print("  export KUBECONFIG=$PWD/.dev/kubeconfig PATH=$PWD/.dev/bin:$PATH")
    print("  kubectl get nodes,devices")
    print("  kubectl get instancetypes          # ENTRANCE is the queue name a Pod sets")
    print("  kubectl apply -f examples/")
    print(f"  local hub (ModelArtifacts resolve against it): {hub}")
    print(f"\n  worker log: {op.log_file}   cluster logs: {info.state_dir / 'logs'}")
    print("  make dev-down stops everything.")
    if not types:
        print("\nwarning: no InstanceType appeared within 60s; see the worker log", file=sys.stderr)
        return 1
    return 0


def down() -> int:
    state = harness.default_state_dir()
    op = gpustack.Operator(state, gpustack.WORKER_PORT, state / "operator-pki")
    gpustack.stop_worker(op)
    if HUB_PID.exists():
        import signal

        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(HUB_PID.read_text()), signal.SIGTERM)
        HUB_PID.unlink()
    if harness.is_running(state):
        info = harness.info(state)
        gpustack.uninstall_webhooks(info)
    harness.stop(state)
    print(
        "gpustack-operator dev cluster stopped (state kept in .dev/cluster; `tests/cluster/down.sh --purge` "
        "removes it)."
    )
    return 0


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    sys.exit({"up": up, "down": down}[command]())
