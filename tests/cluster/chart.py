"""The operator installed the way an administrator installs it: ``helm install`` of
``charts/gpustack-operator``, with the chart's Pods running on the process node
(``process_node.py``), so the worker runs as the chart's ServiceAccount with a token bound to its
Pod — never the admin's kubeconfig.

    host = chart.start_host(info)                     # the process node and its Service stand-in
    chart.install(info, chart.local_values(host))     # helm upgrade --install
    chart.wait_workers_ready(info, host, replicas=1)
    ...
    chart.uninstall(info); chart.stop_host(host)

The values :func:`local_values` adds are only what this machine needs: the worker and the cleanup
hook on the process node, the webhooks registered at the Service stand-in's URL (there is no
kube-proxy to reach a ClusterIP), the certificate valid for 127.0.0.1, the model-manager kept off
the process node, and the cluster's own Kueue and NFD (the harness's) instead of the chart's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gpustack
import harness
import ports

REPO = harness.REPO_ROOT
CHART = REPO / "charts" / "gpustack-operator"
RELEASE = "gpustack-operator"
NAMESPACE = gpustack.SYSTEM_NAMESPACE
HOST_NODE = "gpustack-host"
SERVICE_PORT = int(os.environ.get("GPUSTACK_HOST_SERVICE_PORT", str(ports.port("dev-host"))))
PORT_BASE = int(os.environ.get("GPUSTACK_HOST_PORT_BASE", str(ports.port("dev-host", 1))))
WORKER_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=worker"
ON_HOST = {
    "nodeSelector": {"gpustack.ai/process-node": "true"},
    "tolerations": [{"key": "gpustack.ai/process-node", "operator": "Exists"}],
}


def helm(
    info: harness.ClusterInfo, *args: str, check: bool = True, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess:
    env = info.env()
    env["HELM_CACHE_HOME"] = str(info.state_dir / "helm" / "cache")
    env["HELM_CONFIG_HOME"] = str(info.state_dir / "helm" / "config")
    env["HELM_DATA_HOME"] = str(info.state_dir / "helm" / "data")
    proc = subprocess.run(
        [str(info.bin_dir / "helm"), "--kubeconfig", str(info.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        input=input,
    )
    if check and proc.returncode != 0:
        raise harness.ClusterError(f"helm {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass
class Host:
    """The process node of one cluster (its state lives in ``<state>/process-node``)."""

    state_dir: Path
    service_port: int
    port_base: int

    @property
    def directory(self) -> Path:
        return self.state_dir / "process-node"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pids" / "process-node.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "process-node.log"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.service_port}"

    def pods(self) -> list[dict[str, Any]]:
        try:
            return json.loads((self.directory / "pods.json").read_text())
        except (OSError, ValueError):
            return []

    def workers(self) -> list[dict[str, Any]]:
        return [p for p in self.pods() if p["labels"].get("app.kubernetes.io/component") == "worker"]


def _alive(host: Host) -> int | None:
    try:
        pid = int(host.pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if str(host.directory).encode() in cmdline else None


def start_host(
    info: harness.ClusterInfo, *, service_port: int = SERVICE_PORT, port_base: int = PORT_BASE
) -> Host:
    """The process node (a no-op when it already runs for this cluster)."""
    host = Host(info.state_dir, service_port, port_base)
    if _alive(host) is not None:
        return host
    for directory in (host.directory, host.pid_file.parent, host.log_file.parent):
        directory.mkdir(parents=True, exist_ok=True)
    log = host.log_file.open("ab")
    argv = [
        gpustack.PYTHON, str(Path(__file__).with_name("process_node.py")),
        "--state", str(host.directory), "--kubeconfig", str(info.kubeconfig), "--name", HOST_NODE,
        "--service-port", str(service_port), "--service-selector", "app.kubernetes.io/component=worker",
        "--port-base", str(port_base),
    ]  # fmt: skip
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=info.env(),
    )
    host.pid_file.write_text(str(process.pid))
    harness.wait_for(
        lambda: harness.node_is_ready(info, HOST_NODE), timeout=60, what=f"process node {HOST_NODE} Ready"
    )
    return host


def stop_host(host: Host, *, info: harness.ClusterInfo | None = None, timeout: float = 30) -> None:
    """Stop the process node (its processes get SIGTERM first); with ``info``, delete the Node too."""
    pid = _alive(host)
    if pid is not None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(host) is not None and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.2)
        if _alive(host) is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
    host.pid_file.unlink(missing_ok=True)
    if info is not None:
        info.kubectl("delete", "node", HOST_NODE, "--ignore-not-found", "--wait=false", check=False)


def local_values(host: Host, **overrides: Any) -> dict[str, Any]:
    """What this machine needs on top of the chart's defaults (see the module docstring)."""
    values: dict[str, Any] = {
        "worker": {
            **ON_HOST,
            "webhookURL": host.url,
            "certificate": {"ipAddresses": ["127.0.0.1"]},
        },
        "cleanup": dict(ON_HOST),
        "modelManager": {"tolerations": []},
        # The harness runs the cluster's own Kueue and nfd-master (up.sh, nodes.py).
        "kueue": {"enabled": False},
        "node-feature-discovery": {"enabled": False},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values


def install(
    info: harness.ClusterInfo, values: dict[str, Any], *extra: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``helm upgrade --install`` the chart (values as JSON on stdin: JSON is YAML)."""
    return helm(
        info,
        "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", NAMESPACE, "--create-namespace",
        "--reset-then-reuse-values",
        "--values", "-",
        *extra,
        input=json.dumps(values),
        timeout=timeout,
    )  # fmt: skip


def uninstall(info: harness.ClusterInfo, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return helm(info, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", *extra, timeout=timeout)


def installed(info: harness.ClusterInfo) -> bool:
    return helm(info, "status", RELEASE, "--namespace", NAMESPACE, check=False).returncode == 0


def ready_workers(info: harness.ClusterInfo) -> list[str]:
    pods = info.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", WORKER_SELECTOR)["items"]
    return [
        p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]


def wait_workers_ready(info: harness.ClusterInfo, replicas: int, timeout: float = 180) -> list[str]:
    """Until the worker Deployment is rolled out with ``replicas`` Ready Pods; their names."""

    def done() -> list[str] | None:
        deployment = info.kubectl_json("get", "deployment", f"{RELEASE}-worker", "-n", NAMESPACE)
        status = deployment.get("status") or {}
        rolled = (
            status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == replicas
            and status.get("readyReplicas") == replicas
            and status.get("replicas") == replicas
        )
        names = ready_workers(info)
        return names if rolled and len(names) == replicas else None

    return harness.wait_for(done, timeout=timeout, interval=1, what=f"{replicas} Ready worker Pods")


def token_kubeconfig(info: harness.ClusterInfo, account: str, path: Path, namespace: str = NAMESPACE) -> Path:
    """A kubeconfig holding a token of ServiceAccount ``namespace/account`` (``kubectl create
    token``), for a component the harness runs outside the process node as that account."""
    import yaml

    token = info.kubectl("create", "token", account, "-n", namespace, "--duration", "24h").stdout.strip()
    config = yaml.safe_load(info.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": account}}],
                "current-context": "c",
            }
        )
    )
    path.chmod(0o600)
    return path
