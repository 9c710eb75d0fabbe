"""The worker as one process on 127.0.0.1, the way most e2e modules run it (``make dev`` and the
install tests use the chart instead: ``chart.py``).

The worker's own start-up applies its CRDs, its webhook configurations (``clientConfig.url`` at this
process, with the CA that ``gpustack-operator certs`` issued into the state directory), the
Settings, the NodeFeatureRule and both AdmissionChecks.  :func:`install` still applies the CRDs
beforehand, because some modules write objects of our kinds before the worker starts.

    info = harness.start()
    op = gpustack.install(info)        # CRDs (for writes before the worker), namespace, certs
    gpustack.start_worker(info, op)    # gpustack-operator worker (start-up, webhooks, controllers)
    ...
    gpustack.stop_worker(op); gpustack.uninstall_webhooks(info)
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import harness
import ports

REPO = harness.REPO_ROOT
CRDS = REPO / "charts" / "gpustack-operator" / "crds"
WORKER_PORT = int(os.environ.get("GPUSTACK_WORKER_PORT", str(ports.block("dev-control-plane")["WORKER"])))
SYSTEM_NAMESPACE = "gpustack-system"
PYTHON = (
    str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
)


@dataclass
class Operator:
    state_dir: Path
    port: int
    cert_dir: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pids" / "worker.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "worker.log"


def _python(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, *args], cwd=REPO, capture_output=True, text=True, check=True, **kwargs)


def _crd_versions(info: harness.ClusterInfo, names: list[str]) -> dict[str, str]:
    """resourceVersion of each of ``names`` that is served (``Established``), in-process."""
    listed = info.kubectl_json("get", "customresourcedefinitions", check=False)
    versions = {}
    for crd in listed.get("items") or ():
        conditions = (crd.get("status") or {}).get("conditions") or ()
        if crd["metadata"]["name"] in names and any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        ):
            versions[crd["metadata"]["name"]] = crd["metadata"]["resourceVersion"]
    return versions


def install_crds(info: harness.ClusterInfo) -> None:
    """The chart's CRDs applied and ``Established``. Skipped when this cluster holds every one of them
    exactly as the last apply left it (same files, same resourceVersions, recorded in the state dir):
    each e2e module installs, and the apply cost about 3 s and 1.5 CPU-seconds a time."""
    files = sorted(CRDS.glob("*.yaml"))
    names = [p.name.removesuffix(".yaml") for p in files]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()
    record = info.state_dir / "crds-applied.json"
    try:
        last = json.loads(record.read_text())
    except (OSError, ValueError):
        last = {}
    if (
        last.get("digest") == digest
        and last.get("versions") == _crd_versions(info, names)
        and last["versions"]
    ):
        return
    info.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    info.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    versions = _crd_versions(info, names)
    if len(versions) == len(names):
        record.write_text(json.dumps({"digest": digest, "versions": versions}))


def ensure_namespace(info: harness.ClusterInfo, name: str, timeout: float = 180) -> None:
    """The namespace, created when absent; one an earlier test is still deleting is waited out
    first (applying it while it terminates would leave a namespace that never gets its account)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = info.kubectl("get", "namespace", name, "-o", "json", check=False)
        if (
            current.returncode != 0
            or json.loads(current.stdout).get("status", {}).get("phase") != "Terminating"
        ):
            break
        time.sleep(1)
    info.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def install(info: harness.ClusterInfo, *, port: int = WORKER_PORT) -> Operator:
    """CRDs, the operator namespace and the serving certificate; idempotent.  The webhook
    configurations are the worker's to apply (at its start-up)."""
    op = Operator(info.state_dir, port, info.state_dir / "operator-pki")
    install_crds(info)
    ensure_namespace(info, SYSTEM_NAMESPACE)
    _python(
        "-m",
        "gpustack_operator",
        "certs",
        "--dir",
        str(op.cert_dir),
        "--ip",
        "127.0.0.1",
        "--dns",
        "localhost",
    )
    return op


def uninstall_webhooks(info: harness.ClusterInfo) -> None:
    """Delete our webhook configurations (first, as an uninstall must, so nothing fails closed)."""
    info.kubectl("delete", "mutatingwebhookconfiguration", "gpustack-worker-mutation", "--ignore-not-found")
    info.kubectl(
        "delete", "validatingwebhookconfiguration", "gpustack-worker-validation", "--ignore-not-found"
    )


def take_pools_down(info: harness.ClusterInfo, timeout: float = 90, what: str = "e2e teardown") -> None:
    """A teardown step, once a module's managed nodes are removed and with the controllers still
    running: wait for the pools' ResourceFlavors to go, delete every InstanceType and wait for the
    controllers to tear each down. A step that times out prints what it waited for and goes on."""

    def quietly(predicate, waited_for: str) -> None:
        try:
            harness.wait_for(predicate, timeout=timeout, what=waited_for)
        except TimeoutError as error:
            print(f"{what}: {error}")

    flavors = ("get", "resourceflavors.kueue.x-k8s.io", "-l", "resource.gpustack.ai/type")
    quietly(lambda: not info.kubectl_json(*flavors)["items"], "the pools' flavors gone")
    info.kubectl("delete", "instancetypes", "--all", "--wait=false", check=False)
    quietly(lambda: not info.kubectl_json("get", "instancetypes")["items"], "InstanceTypes gone")


def _pid(op: Operator) -> int | None:
    try:
        pid = int(op.pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def worker_ready(op: Operator) -> bool:
    """``/readyz``: 200 once the worker's start-up is done (every step) and its caches synced."""
    context = ssl.create_default_context(cafile=str(op.cert_dir / "ca.crt"))
    try:
        with urllib.request.urlopen(f"{op.url}/readyz", context=context, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def scrape(op: Operator) -> dict[str, float]:
    """The worker's ``/metrics`` as ``{'name{labels}': value}`` (raises OSError when unreachable)."""
    context = ssl.create_default_context(cafile=str(op.cert_dir / "ca.crt"))
    with urllib.request.urlopen(f"{op.url}/metrics", context=context, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            sample, _, value = line.rpartition(" ")
            samples[sample] = float(value)
    return samples


def metric(op: Operator, name: str) -> float | None:
    """One sample of the worker's ``/metrics`` (None when absent or unreachable)."""
    try:
        return scrape(op).get(name)
    except OSError:
        return None


def controllers_settled(op: Operator) -> bool:
    """The worker's controllers made their take-over pass and have nothing pending
    (``gpustack_controllers_settled``, kube/manager.py): what a test waits on after a restart."""
    return metric(op, "gpustack_controllers_settled") == 1.0


def start_worker(info: harness.ClusterInfo, op: Operator, *extra: str, timeout: float = 90) -> int:
    """Start ``gpustack-operator worker`` in the background (a no-op when it already runs)."""
    pid = _pid(op)
    if pid is not None and worker_ready(op):
        return pid
    op.pid_file.parent.mkdir(parents=True, exist_ok=True)
    op.log_file.parent.mkdir(parents=True, exist_ok=True)
    log = op.log_file.open("ab")
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "gpustack_operator",
            "worker",
            "--kubeconfig",
            str(info.kubeconfig),
            "--cert-dir",
            str(op.cert_dir),
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(op.port),
            "--webhook-url",
            op.url,
            *extra,
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={k: v for k, v in info.env().items() if k.lower() not in ("http_proxy", "https_proxy")},
    )
    op.pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise harness.ClusterError(f"worker exited ({process.returncode}); see {op.log_file}")
        if worker_ready(op):
            return process.pid
        time.sleep(0.2)
    raise harness.ClusterError(f"worker not ready within {timeout}s; see {op.log_file}")


def _gone(pid: int) -> bool:
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it
        if reaped == pid:
            return True
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return True
    return False


def stop_worker(op: Operator, timeout: float = 15) -> None:
    pid = _pid(op)
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    op.pid_file.unlink(missing_ok=True)
