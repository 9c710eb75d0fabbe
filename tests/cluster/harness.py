"""Python face of the local e2e cluster (tests/cluster/{build,up,down}.sh).

Stdlib + subprocess only, so any test environment can import it:

    from tests.cluster import harness          # or: import harness (sys.path)
    harness.ensure_built()
    info = harness.start()                     # ClusterInfo
    harness.create_fake_node(info, "gpu-0", capacity={"nvidia.com/gpu": "8"})
    info.kubectl("get", "nodes")
    harness.stop()

Fake nodes are Node objects annotated ``kwok.x-k8s.io/node: fake``; the kwok
process started by up.sh keeps them Ready (status + Lease) and moves Pods
bound to them to Running.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

try:  # imported as tests.cluster.harness, or as harness with tests/cluster on sys.path
    from . import restget
except ImportError:
    import restget  # type: ignore[no-redef]

CLUSTER_DIR = Path(__file__).resolve().parent
REPO_ROOT = CLUSTER_DIR.parent.parent

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# What a fake node offers besides the caller's extended resources.
DEFAULT_NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "250", "ephemeral-storage": "1Ti"}

# The first build compiles Kubernetes from source: allow for it.
BUILD_TIMEOUT_S = int(os.environ.get("GPUSTACK_CLUSTER_BUILD_TIMEOUT", 60 * 60))
START_TIMEOUT_S = int(os.environ.get("GPUSTACK_CLUSTER_START_TIMEOUT", 10 * 60))


class ClusterError(RuntimeError):
    pass


def default_state_dir() -> Path:
    return Path(os.environ.get("GPUSTACK_CLUSTER_DIR") or REPO_ROOT / ".dev" / "cluster").resolve()


def _env(state_dir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["GPUSTACK_CLUSTER_DIR"] = str(state_dir or default_state_dir())
    return env


def _run_script(script: str, *args: str, state_dir: Path | None = None, timeout: float) -> str:
    proc = subprocess.run(
        ["bash", str(CLUSTER_DIR / script), *args],
        env=_env(state_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise ClusterError(f"{script} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def bin_dir() -> Path:
    """The cache dir build.sh uses for the current pins (may not exist yet)."""
    return Path(_run_script("build.sh", "--bin-dir", timeout=120).strip().splitlines()[-1])


def is_built() -> bool:
    return (bin_dir() / ".complete").is_file()


def ensure_built() -> Path:
    """Builds the upstream binaries if the cache lacks them; returns the bin dir."""
    return Path(_run_script("build.sh", timeout=BUILD_TIMEOUT_S).strip().splitlines()[-1])


def _read_env_file(path: Path) -> dict[str, str]:
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


@dataclass
class ClusterInfo:
    state_dir: Path
    kubeconfig: Path
    server: str
    bin_dir: Path
    started: bool = False  # True when start() launched it (False: it was already up)
    versions: dict[str, str] = field(default_factory=dict)  # bin_dir/versions.env
    endpoints: dict[str, str] = field(default_factory=dict)  # state_dir/cluster.env (ports, URLs)

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def kueue_webhook_url(self) -> str:
        return self.endpoints["KUEUE_WEBHOOK_URL"]

    @property
    def ca_cert(self) -> Path:
        """CA that signed the apiserver's and Kueue's serving certs."""
        return self.state_dir / "pki" / "ca.crt"

    @property
    def ca_key(self) -> Path:
        """Sign your own webhook serving certs with this and use ca_cert as caBundle."""
        return self.state_dir / "pki" / "ca.key"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(k, None)
        return env

    @property
    def reader(self) -> restget.Reader | None:
        """The in-process ``get`` for this cluster's admin kubeconfig (None: fork kubectl)."""
        if "_reader" not in self.__dict__:
            pki = self.state_dir / "pki"
            usable = (
                os.environ.get("GPUSTACK_TEST_FORK_KUBECTL", "") in ("", "0")
                and self.kubeconfig == self.state_dir / "kubeconfig"
                and (pki / "admin.crt").exists()
            )
            self.__dict__["_reader"] = (
                restget.Reader(self.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
                if usable
                else None
            )
        return self.__dict__["_reader"]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """kubectl ``args``; a ``get ... -o json``, a plain ``delete`` and the create or apply of one
        new object are answered in-process (tests/cluster/restget.py)."""
        answered = self.reader.answer(args, timeout, input) if self.reader is not None else None
        if answered is not None:
            if check and answered.returncode != 0:
                raise ClusterError(
                    f"kubectl {' '.join(args)} failed ({answered.returncode}): {answered.stderr}"
                )
            return answered
        trace = os.environ.get("GPUSTACK_TEST_KUBECTL_TRACE")
        if trace:  # which calls still fork (docs/testing.md): one line each, the verb first
            with open(trace, "a") as out:
                out.write(" ".join(args).replace("\n", " ")[:300] + ("  <stdin>" if input else "") + "\n")
        proc = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def kubectl_json(self, *args: str, **kw: Any) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", **kw).stdout)

    def apply(self, manifest: str | Mapping | Iterable[Mapping], *extra: str) -> str:
        """kubectl apply -f - ; manifest is YAML/JSON text, an object or a list of objects."""
        if isinstance(manifest, str):
            text = manifest
        elif isinstance(manifest, Mapping):
            text = json.dumps(manifest)
        else:
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifest)})
        return self.kubectl("apply", "-f", "-", *extra, input=text).stdout


def _info(state_dir: Path, started: bool) -> ClusterInfo:
    endpoints = _read_env_file(state_dir / "cluster.env")  # written by up.sh
    if not endpoints:
        raise ClusterError(f"no {state_dir / 'cluster.env'}: is the cluster up?")
    bdir = Path(endpoints["BIN_DIR"])
    return ClusterInfo(
        state_dir=state_dir,
        kubeconfig=Path(endpoints["KUBECONFIG"]),
        server=endpoints["APISERVER_URL"],
        bin_dir=bdir,
        started=started,
        versions=_read_env_file(bdir / "versions.env"),
        endpoints=endpoints,
    )


def info(state_dir: Path | str | None = None) -> ClusterInfo:
    """ClusterInfo of a cluster already started by up.sh (or start())."""
    return _info(Path(state_dir).resolve() if state_dir else default_state_dir(), started=False)


def is_running(state_dir: Path | str | None = None) -> bool:
    """True when every component of up.sh runs for this state dir."""
    state_dir = Path(state_dir).resolve() if state_dir else default_state_dir()
    pids = state_dir / "pids"
    names = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kwok"]
    if (state_dir / "no-kueue").exists():  # up.sh with GPUSTACK_CLUSTER_KUEUE=0
        names.remove("kueue")
    for name in names:
        try:
            pid = int((pids / f"{name}.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError):
            return False
        if f"{state_dir}/".encode() not in cmdline:
            return False
    return True


def start(state_dir: Path | str | None = None) -> ClusterInfo:
    """Builds if needed and starts the cluster (a no-op when it already runs)."""
    state_dir = Path(state_dir).resolve() if state_dir else default_state_dir()
    was_running = is_running(state_dir)
    ensure_built()
    _run_script("up.sh", state_dir=state_dir, timeout=START_TIMEOUT_S)
    return _info(state_dir, started=not was_running)


def stop(state_dir: Path | str | None = None, purge: bool = False) -> None:
    state_dir = Path(state_dir).resolve() if state_dir else default_state_dir()
    _run_script("down.sh", *(["--purge"] if purge else []), state_dir=state_dir, timeout=120)


# --------------------------------------------------------------------- quantities
_QUANTITY_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def yaml_documents(text: str) -> list[Any]:
    """The non-empty YAML documents of ``text``, parsed by libyaml (PyYAML's C loader, where the wheel
    has it): on a rendered chart, 0.4 s against the pure-Python loader's 5 s."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc]


def parse_quantity(value: str | int | float) -> Fraction:
    """Kubernetes resource.Quantity -> exact number ("1600k" -> 1600000, "100m" -> 1/10)."""
    if isinstance(value, (int, float)):
        return Fraction(value)
    text = value.strip()
    m = re.fullmatch(r"([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+)|([a-zA-Z]*))", text)
    if not m or m.group(3) not in (None, *_QUANTITY_SUFFIXES):
        raise ValueError(f"not a quantity: {value!r}")
    number = Fraction(m.group(1))
    if m.group(2) is not None:
        return number * Fraction(10) ** int(m.group(2))
    return number * _QUANTITY_SUFFIXES[m.group(3) or ""]


# --------------------------------------------------------------------- waiting
def wait_for(predicate, timeout: float = 60, interval: float = 0.2, what: str = "condition"):
    """Polls predicate() until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (ClusterError, subprocess.SubprocessError, ValueError, KeyError) as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout}s waiting for {what}" + (f": {last_exc}" if last_exc else "")
            )
        time.sleep(interval)


def wait_for_default_service_account(info: ClusterInfo, namespace: str, timeout: float = 60) -> None:
    """Pods are refused until the controller-manager created the namespace's SA."""
    wait_for(
        lambda: (
            info.kubectl(
                "get", "serviceaccount", "default", "-n", namespace, "-o", "json", check=False
            ).returncode
            == 0
        ),
        timeout=timeout,
        what=f"serviceaccount default in {namespace}",
    )


NUDGE_ANNOTATION = "e2e.gpustack.ai/nudge"


def delete_namespace(info: ClusterInfo, name: str, timeout: float = 180) -> bool:
    """Delete the namespace ``name`` and wait until it is gone (True; False when ``timeout`` ran out).

    What ``kubectl delete namespace --wait`` does, without its idle seconds. The namespace
    controller (kube-controller-manager) first looks at a terminating namespace 5 s after the delete,
    and while content remains it looks again only after half the longest grace period of its
    running Pods plus one second (16 s for the default 30) or 8 s for objects held by finalizers,
    however soon that content goes: a teardown of a few Pods took 20-35 s. So the Pods are deleted
    at once (a terminating namespace admits no new ones), and the namespace is touched (an
    annotation) every few seconds: each update brings the controller's next look forward to 5 s
    after it. The namespace goes as it always does, by the controller, once empty."""

    def gone(answer: subprocess.CompletedProcess) -> bool:  # --ignore-not-found: nothing printed
        return answer.returncode == 0 and not answer.stdout.strip()

    deleted = info.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false", check=False)
    if deleted.returncode != 0:
        return False  # refused, or the apiserver is not answering: nothing to wait for
    if gone(deleted):
        return True
    info.kubectl("delete", "pods", "--all", "-n", name, "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    nudged, nudges = time.monotonic(), 0
    while time.monotonic() < deadline:
        if gone(info.kubectl("get", "namespace", name, "-o", "json", "--ignore-not-found", check=False)):
            return True
        if time.monotonic() - nudged >= 4:
            nudges += 1
            info.kubectl(
                "annotate", "namespace", name, f"{NUDGE_ANNOTATION}={nudges}", "--overwrite", check=False
            )
            nudged = time.monotonic()
        time.sleep(0.2)
    return False


# --------------------------------------------------------------------- fake nodes
def fake_node_manifest(
    name: str,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str | int] | None = None,
    allocatable: Mapping[str, str | int] | None = None,
    taints: list[Mapping[str, str]] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict:
    cap = {**DEFAULT_NODE_CAPACITY, **{k: str(v) for k, v in (capacity or {}).items()}}
    alloc = {**cap, **{k: str(v) for k, v in (allocatable or {}).items()}}
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        **(labels or {}),
    }
    node: dict = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", **(annotations or {})},
        },
        "spec": {},
        # Node status may be set on create; kwok keeps these and adds conditions.
        "status": {"capacity": cap, "allocatable": alloc},
    }
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    return node


def node_is_ready(info: ClusterInfo, name: str, since: float | None = None) -> bool:
    """The Node's Ready condition is True (and, with ``since``, a kubelet reported it at or after
    that epoch time: a Node kept in etcd from an earlier run says Ready until it goes stale)."""
    import datetime as dt

    node = info.kubectl_json("get", "node", name)
    for c in node.get("status", {}).get("conditions", []):
        if c.get("type") == "Ready" and c.get("status") == "True":
            if since is None:
                return True
            beat = dt.datetime.fromisoformat(c.get("lastHeartbeatTime") or "1970-01-01T00:00:00Z")
            return beat.timestamp() >= since - 1
    return False


def create_fake_node(
    info: ClusterInfo,
    name: str,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str | int] | None = None,
    allocatable: Mapping[str, str | int] | None = None,
    taints: list[Mapping[str, str]] | None = None,
    annotations: Mapping[str, str] | None = None,
    wait_ready: float = 60,
) -> dict:
    """Creates (or replaces) a fake node and waits until kwok reports it Ready.

    capacity/allocatable are merged over DEFAULT_NODE_CAPACITY (allocatable
    defaults to capacity), e.g. ``capacity={"nvidia.com/gpu": 8}``.
    """
    manifest = fake_node_manifest(name, labels, capacity, allocatable, taints, annotations)
    info.kubectl("delete", "node", name, "--ignore-not-found", "--wait=true")
    info.kubectl("create", "-f", "-", input=json.dumps(manifest))
    if wait_ready:
        wait_for(lambda: node_is_ready(info, name), timeout=wait_ready, what=f"node {name} Ready")
    return info.kubectl_json("get", "node", name)


def delete_fake_node(info: ClusterInfo, name: str) -> None:
    info.kubectl("delete", "node", name, "--ignore-not-found")
