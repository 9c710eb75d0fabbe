"""Real kubelet nodes with simulated accelerators, beside the kwok nodes of the local control plane.

Each node is upstream's kubelet over the CRI fake runtime (``build-node.sh``), plus the project's own
device manager serving a node profile (``profiles/*.yaml``) through the kubelet device-plugin API:

    <state>/nodes/<name>/
        kl/              bind-mounted onto /var/lib/kubelet inside the kubelet's private mount
                         namespace (device-plugins/, pod-resources/, pods/, pki/ ...)
        profile.yaml     the simulated hardware (edit it to change cards or health)
        dm-args.json     extra device-manager arguments (e.g. --sysfs-root of a simulated RDMA
                         tree a test built in this directory), kept across restarts
        containers.jsonl every CreateContainer the kubelet asked the fake runtime for
        profile.instances.json  the simulated cards' live GPU instances (they outlive the agent)
        dm-state/        the device manager's --state-dir (partitions/: its ownership markers)
        kubelet.yaml, kubeconfig, node.crt/key, cri.sock, dm-certs/, pod-logs/
        logs/{kubelet,cri-fake,device-manager}.log   pids/{...}.pid

Only the empty mount point ``/var/lib/kubelet`` is needed on the host; nothing else is written
outside the state directory.  Ports: three per node from ``GPUSTACK_NODE_PORT_BASE`` (kubelet,
kubelet healthz, device-manager HTTPS).  kwok nodes get a publish-only device manager (no kubelet
there); node features that nfd-worker would report (PCI vendor, CPU identity) are written as the
NodeFeature nfd-worker publishes — the one thing a harness may simulate.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import container_node
import gpustack
import harness
import ports

HERE = Path(__file__).resolve().parent
PROFILES = HERE / "profiles"
KUBELET_MOUNT = Path("/var/lib/kubelet")
NFD_NAMESPACE = "node-feature-discovery"
NODE_PORT_BASE = int(os.environ.get("GPUSTACK_NODE_PORT_BASE", str(ports.port("dev-nodes"))))
NODE_READY_TIMEOUT = float(os.environ.get("GPUSTACK_NODE_READY_TIMEOUT", "120"))
# Publish-only device managers of kwok nodes: one port per slot from here.
KWOK_DM_PORT_BASE = int(os.environ.get("GPUSTACK_KWOK_DM_PORT_BASE", str(ports.port("dev-kwok-dm"))))


def node_bin_dir() -> Path:
    out = subprocess.run(
        ["bash", str(HERE / "build-node.sh")], capture_output=True, text=True, timeout=harness.BUILD_TIMEOUT_S
    )
    if out.returncode != 0:
        raise harness.ClusterError(f"build-node.sh failed:\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class Node:
    name: str
    directory: Path
    slot: int
    manufacturer: str = "nvidia"
    real: bool = True  # a kubelet node (False: kwok, publish-only device manager)
    runtime: str = "fake"  # a kubelet node's runtime: "fake" (records containers) or "containerd"

    @property
    def containers_run(self) -> bool:
        return self.real and self.runtime == "containerd"

    @property
    def root(self) -> Path:
        return self.directory / "kl"  # short: the plugin sockets under it must stay within 107 bytes

    @property
    def profile(self) -> Path:
        return self.directory / "profile.yaml"

    @property
    def records(self) -> Path:
        return self.directory / "containers.jsonl"

    @property
    def kubelet_port(self) -> int:
        return NODE_PORT_BASE + 3 * self.slot

    @property
    def healthz_port(self) -> int:
        return NODE_PORT_BASE + 3 * self.slot + 1

    @property
    def dm_port(self) -> int:
        return NODE_PORT_BASE + 3 * self.slot + 2 if self.real else KWOK_DM_PORT_BASE + self.slot

    @property
    def kube_socket(self) -> Path:
        return self.root / "device-plugins" / "kubelet.sock"

    def pid_file(self, component: str) -> Path:
        return self.directory / "pids" / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.directory / "logs" / f"{component}.log"

    def containers(self) -> list[dict[str, Any]]:
        """What the fake runtime recorded (one entry per CreateContainer)."""
        if not self.records.exists():
            return []
        return [json.loads(line) for line in self.records.read_text().splitlines() if line.strip()]


def _state(info: harness.ClusterInfo) -> Path:
    return info.state_dir / "nodes"


def node_directory(info: harness.ClusterInfo, name: str) -> Path:
    """Where node ``name`` keeps its state (simulated hardware a test builds goes under it)."""
    return _state(info) / name


def _launch(
    node: Node, component: str, argv: list[str], env: dict[str, str] | None = None, *, cwd: Path | None = None
) -> int:
    node.pid_file(component).parent.mkdir(parents=True, exist_ok=True)
    node.log_file(component).parent.mkdir(parents=True, exist_ok=True)
    log = node.log_file(component).open("ab")
    log.write(f"=== {time.strftime('%FT%TZ', time.gmtime())} {' '.join(argv)}\n".encode())
    log.flush()
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        cwd=cwd or gpustack.REPO,
    )
    node.pid_file(component).write_text(str(process.pid))
    return process.pid


def _alive(node: Node, component: str) -> int | None:
    try:
        pid = int(node.pid_file(component).read_text())
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if str(node.directory).encode() in cmdline else None


def stop_component(node: Node, component: str, timeout: float = 15) -> None:
    pid = _alive(node, component)
    if pid is None:
        node.pid_file(component).unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)
            if reaped == pid:
                break
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    node.pid_file(component).unlink(missing_ok=True)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


# Signing writes the CA's serial file: one node at a time (start_nodes starts several at once).
_SIGNING = threading.Lock()


def _node_credentials(info: harness.ClusterInfo, node: Node) -> None:
    """A client certificate for ``system:node:<name>`` (group ``system:nodes``) and its kubeconfig."""
    key, crt, csr = node.directory / "node.key", node.directory / "node.crt", node.directory / "node.csr"
    if not crt.exists():
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
        _openssl(
            "req",
            "-new",
            "-key",
            str(key),
            "-subj",
            f"/O=system:nodes/CN=system:node:{node.name}",
            "-out",
            str(csr),
        )
        ext = node.directory / "node.ext"
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
        )
        with _SIGNING:
            _openssl(
                "x509", "-req", "-in", str(csr), "-CA", str(info.ca_cert), "-CAkey", str(info.ca_key),
                "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", str(ext), "-out", str(crt),
            )  # fmt: skip
        csr.unlink(missing_ok=True)
    # A container node reaches the apiserver at the `kubernetes` Service's address inside its network.
    server = f"https://{container_node.SERVICE_IP}:443" if node.containers_run else info.server
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(info.ca_cert)}}
        ],
        "users": [{"name": node.name, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": node.name}}],
        "current-context": "local",
    }
    (node.directory / "kubeconfig").write_text(json.dumps(config))


def _kubelet_config(info: harness.ClusterInfo, node: Node) -> Path:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(info.ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "address": "127.0.0.1",
        "port": node.kubelet_port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "readOnlyPort": 0,
        "resolvConf": "",
        "containerRuntimeEndpoint": f"unix://{node.directory / 'cri.sock'}",
        "podLogsDir": str(node.directory / "pod-logs"),
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "registerNode": True,
    }
    if node.containers_run:
        config.update(container_node.kubelet_overrides(container_node.network_id(node.kubelet_port)))
    path = node.directory / "kubelet.yaml"
    path.write_text(json.dumps(config))
    return path


def _dm_argv(info: harness.ClusterInfo, node: Node) -> list[str]:
    argv = [
        gpustack.PYTHON, "-m", "gpustack_operator", "device-manager", "serve",
        "--manufacturer", node.manufacturer,
        "--simulate", str(node.profile),
        "--node-name", node.name,
        "--kubeconfig", str(info.kubeconfig),
        "--bind-address", "127.0.0.1",
        "--secure-port", str(node.dm_port),
        "--cert-dir", str(node.directory / "dm-certs"),
        "--state-dir", str(node.directory / "dm-state"),
        "--monitor-period", "5",
    ]  # fmt: skip
    if node.real:
        argv += ["--kube-socket", str(node.kube_socket)]
    else:
        argv += ["--publish-only"]
    extra = node.directory / "dm-args.json"  # what start_node(dm_args=...) asked for, kept for restarts
    if extra.exists():
        argv += [str(a) for a in json.loads(extra.read_text())]
    return argv


def start_device_manager(info: harness.ClusterInfo, node: Node) -> int:
    """Start the node's device manager (unless it runs) and wait for its ``/readyz``: on a kubelet
    node that means every resource registered and its device list with the kubelet, which until
    then refuses a Pod asking for one (``UnexpectedAdmissionError``, for good)."""
    if (pid := _alive(node, "device-manager")) is None:
        env = {k: v for k, v in info.env().items() if k.lower() not in ("http_proxy", "https_proxy")}
        pid = _launch(node, "device-manager", _dm_argv(info, node), env)
    harness.wait_for(
        lambda: device_manager_ready(node), timeout=90, what=f"the device manager of {node.name} ready"
    )
    return pid


def device_manager_ready(node: Node) -> bool:
    import ssl
    import urllib.error
    import urllib.request

    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # its own self-signed serving certificate
    direct = urllib.request.build_opener(  # loopback: never through a proxy from the environment
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)
    )
    try:
        with direct.open(f"https://127.0.0.1:{node.dm_port}/readyz", timeout=2) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError):
        return False


def start_kubelet(info: harness.ClusterInfo, node: Node, bin_dir: Path) -> None:
    # An empty working directory of their own: nothing a relative path names can be in the repository.
    scratch = node.directory / "cwd"
    scratch.mkdir(parents=True, exist_ok=True)
    if node.containers_run:
        _start_container_node(info, node, bin_dir, scratch)
        return
    if _alive(node, "cri-fake") is None:
        _launch(node, "cri-fake", [str(bin_dir / "cri-fake"), "--endpoint", f"unix://{node.directory / 'cri.sock'}",
                                   "--record", str(node.records)], cwd=scratch)  # fmt: skip
    if _alive(node, "kubelet") is None:
        KUBELET_MOUNT.mkdir(parents=True, exist_ok=True)
        # --vmodule: the device manager's decisions (pre-allocated, running, to allocate, removed
        # Pods) in the log; the only other manager.go files are DRA's and the object cache's. The
        # runtime manager's actions per Pod sync, its kills and a sandbox it wants re-created (the
        # kuberuntime files and util.go) say why a Pod's container stopped.
        script = (
            f'mount --bind "{node.root}" {KUBELET_MOUNT} && exec "{bin_dir / "kubelet"}" '
            f'--config="{node.directory / "kubelet.yaml"}" --kubeconfig="{node.directory / "kubeconfig"}" '
            f"--hostname-override={node.name} --node-ip=127.0.0.1 --v=1 "
            "--vmodule=manager=3,kuberuntime_manager=3,kuberuntime_container=3,util=2"
        )
        _launch(
            node, "kubelet", ["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=scratch
        )


def _start_container_node(info: harness.ClusterInfo, node: Node, bin_dir: Path, scratch: Path) -> None:
    """The kubelet over containerd in the node's own namespaces (container_node.py)."""
    net = container_node.network_id(node.kubelet_port)
    container_node.prepare(node.directory, net)
    if _alive(node, "relay") is None:
        _launch(node, "relay", container_node.relay_argv(node.directory, info.server), cwd=scratch)
    if _alive(node, "kubelet") is None:
        script = container_node.node_script(node.directory, net, bin_dir / "kubelet", node.name)
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": str(scratch)}
        pid = _launch(
            node,
            "kubelet",
            ["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script],
            env,
            cwd=scratch,
        )
        container_node.wire_network(pid, net)
    if _alive(node, "dns") is None:  # on the veth's host end, which wire_network made
        argv = container_node.dns_argv(gpustack.PYTHON, node.directory, net, info.state_dir, info.server)
        _launch(node, "dns", argv, cwd=scratch)


def nfd_worker_features(
    node: str,
    vendor: str,
    *,
    cpu_vendor: str = "AMD",
    cpu_family: str = "25",
    cpu_id: str = "1",
    cpu_name: str = "AMD EPYC 7763 64-Core Processor",
) -> dict:
    """The NodeFeature nfd-worker publishes for a node: PCI vendor presence and CPU identity."""
    labels = {
        "feature.node.kubernetes.io/cpu-model.vendor_id": cpu_vendor,
        "feature.node.kubernetes.io/cpu-model.family": cpu_family,
        "feature.node.kubernetes.io/cpu-model.id": cpu_id,
    }
    pci = []
    if vendor:
        labels[f"feature.node.kubernetes.io/pci-{vendor}.present"] = "true"
        pci.append({"attributes": {"vendor": vendor, "class": "0302", "device": "2330"}})
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": node,
            "namespace": NFD_NAMESPACE,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {
            "features": {
                "attributes": {
                    "cpu.model": {
                        "elements": {
                            "vendor_id": cpu_vendor,
                            "family": cpu_family,
                            "id": cpu_id,
                            "name": cpu_name,
                            "physical_cores": "64",
                            "threads_per_core": "2",
                            "logical_cores": "128",
                        }
                    }
                },
                "instances": {"pci.device": {"elements": pci}},
            },
            "labels": labels,
        },
    }


def ensure_nfd_master(info: harness.ClusterInfo, host: str) -> None:
    """Start nfd-master (once per cluster) hosted on node ``host``: it annotates the node it runs on
    when it starts, so it needs one; it keeps running when that node goes."""
    state = info.state_dir / "nfd"
    master = Node("nfd-master", state, 0)
    if _alive(master, "nfd-master") is not None:
        return
    state.mkdir(parents=True, exist_ok=True)
    config = state / "nfd-master.conf"
    if not config.exists():
        config.write_text(
            'extraLabelNs: ["gpustack.ai", "feature.gpustack.ai", "acceleratable.feature.gpustack.ai", '
            '"general.feature.gpustack.ai", "topology.gpustack.ai"]\n'
        )
    env = {**info.env(), "KUBERNETES_NAMESPACE": NFD_NAMESPACE, "NODE_NAME": host}
    port = info.endpoints.get("NFD_PORT") or os.environ.get(
        "GPUSTACK_NFD_PORT", str(ports.block("dev-control-plane")["NFD"])
    )
    argv = [
        str(node_bin_dir() / "nfd-master"),
        f"-kubeconfig={info.kubeconfig}",
        f"-config={config}",
        f"-port={port}",
        "-v=1",
    ]
    _launch(master, "nfd-master", argv, env)
    import urllib.request

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            if _alive(master, "nfd-master") is None:
                raise harness.ClusterError(
                    f"nfd-master exited; see {master.log_file('nfd-master')}"
                ) from None
            return False

    harness.wait_for(healthy, timeout=60, what="nfd-master healthy")


def nfd_master_running(info: harness.ClusterInfo) -> bool:
    return _alive(Node("nfd-master", info.state_dir / "nfd", 0), "nfd-master") is not None


def stop_nfd_master(info: harness.ClusterInfo) -> None:
    """For a module that started nfd-master over kwok nodes of its own (no node agents)."""
    stop_component(Node("nfd-master", info.state_dir / "nfd", 0), "nfd-master")


def start_node(
    info: harness.ClusterInfo,
    name: str,
    profile: str | Path,
    *,
    slot: int,
    real: bool = True,
    manufacturer: str = "nvidia",
    dm_args: list[str] | None = None,
    runtime: str = "fake",
    images: dict[str, Path] | None = None,
    nfd_master: bool = True,
) -> Node:
    """Start (or find running) a node with the hardware of ``profile``; waits until it is Ready and
    its device manager has published its ``Devices``.  ``dm_args`` are added to the device
    manager's command line (e.g. ``--sysfs-root`` of a simulated RDMA tree in the node's directory).
    ``runtime="containerd"``: Pods run as containers of ``images`` (ref -> archive), and the device
    manager is the chart's DaemonSet; ``nfd_master=False``: the cluster's NFD is the chart's too."""
    node = Node(name, node_directory(info, name), slot, manufacturer, real, runtime if real else "fake")
    node.root.mkdir(parents=True, exist_ok=True)
    if dm_args is not None:
        (node.directory / "dm-args.json").write_text(json.dumps(dm_args))
    (node.directory / "slot").write_text(str(slot))
    (node.directory / "kind").write_text(f"{'kubelet' if real else 'kwok'} {manufacturer} {node.runtime}")
    if not node.profile.exists():
        shutil.copyfile(profile if Path(profile).is_absolute() else PROFILES / profile, node.profile)
    if node.containers_run:
        # The simulated hardware where the chart's device manager reads it (deviceManager.simulate).
        (node.directory / "sim").mkdir(parents=True, exist_ok=True)
        if not (node.directory / "sim" / "profile.yaml").exists():
            shutil.copyfile(node.profile, node.directory / "sim" / "profile.yaml")
    gpustack.ensure_namespace(info, NFD_NAMESPACE)
    # The namespace the device manager's DaemonSet runs in and publishes its NodeFeature to (the
    # chart's install namespace): a module that installs no operator still needs it.
    from api.constants import SYSTEM_NAMESPACE

    gpustack.ensure_namespace(info, SYSTEM_NAMESPACE)
    from nodeplugins.devicemanager.simulation import profile as profiles

    vendor = {"nvidia": "10de"}.get(manufacturer) or _vendor_of(manufacturer)
    if real:
        _node_credentials(info, node)
        _kubelet_config(info, node)
        since = time.time() if _alive(node, "kubelet") is None else None
        start_kubelet(info, node, node_bin_dir())
        if node.containers_run:
            container_node.import_images(node.directory, images or {})
        harness.wait_for(
            lambda: harness.node_is_ready(info, name, since),
            timeout=NODE_READY_TIMEOUT,
            what=f"kubelet node {name} Ready",
        )
        if node.containers_run:  # the kubelet labels only a Node it registers, not one it finds
            info.kubectl("label", "node", name, "--overwrite", "=".join(container_node.RUNTIME_LABEL))
    else:
        cards = len(profiles.load(node.profile, node=name).cards)
        if info.kubectl("get", "node", name, check=False).returncode != 0:
            harness.create_fake_node(info, name, capacity=kwok_capacity(node, cards))
    if nfd_master:
        ensure_nfd_master(info, name)
    info.apply(nfd_worker_features(name, vendor))
    if node.containers_run:
        return node  # its device manager is the chart's DaemonSet
    start_device_manager(info, node)
    harness.wait_for(
        lambda: info.kubectl("get", "devices", name, check=False).returncode == 0,
        timeout=60,
        what=f"Devices {name} published by its device manager",
    )
    return node


def start_nodes(info: harness.ClusterInfo, specs: list[dict[str, Any]]) -> list[Node]:
    """``start_node(info, **spec)`` for each spec: the first alone (it may start nfd-master and
    create the namespaces), the rest at once. Each waits on its own kubelet and device manager,
    so starting them together costs the longest start, not the sum."""
    if not specs:
        return []
    first = start_node(info, **specs[0])
    if len(specs) == 1:
        return [first]
    with ThreadPoolExecutor(max_workers=len(specs) - 1) as pool:
        rest = list(pool.map(lambda spec: start_node(info, **spec), specs[1:]))
    return [first, *rest]


def _vendor_of(manufacturer: str) -> str:
    from api.manufacturers import BY_NAME

    return BY_NAME[manufacturer].pci_vendor_id


def kwok_capacity(node: Node, cards: int) -> dict[str, str]:
    """What a kubelet would report for the device manager's plugins on a kwok node (kwok stands in
    for the kubelet there): the token counts the plugin servers advertise."""
    from nodeplugins.devicemanager import devices, tokens
    from nodeplugins.devicemanager.backends import backend_for

    inventory = backend_for(node.manufacturer, simulate=node.profile, node=node.name).discover()
    groups = devices.spec_groups(inventory)
    capacity = {}
    for resource in tokens.resources(node.manufacturer):
        capacity[resource.name] = str(sum(1 for _t, ok, _n in tokens.devices_of(resource, groups, {}) if ok))
    return capacity


def node(info: harness.ClusterInfo, name: str) -> Node | None:
    directory = _state(info) / name
    if not directory.exists():
        return None
    return _read_node(directory)


def _read_node(directory: Path) -> Node:
    slot_file, kind_file = directory / "slot", directory / "kind"
    kind, manufacturer, runtime = (
        ([*kind_file.read_text().split(), "kubelet", "nvidia", "fake"])[:3]
        if kind_file.exists()
        else ("kubelet", "nvidia", "fake")
    )
    if runtime not in ("fake", "containerd"):
        runtime = "fake"
    return Node(
        directory.name,
        directory,
        int(slot_file.read_text()) if slot_file.exists() else 0,
        manufacturer,
        kind == "kubelet",
        runtime,
    )


def restart_kubelet(info: harness.ClusterInfo, node: Node) -> None:
    stop_component(node, "kubelet")
    start_kubelet(info, node, node_bin_dir())


def stop_node(node: Node) -> None:
    """Stop the node's processes; nfd-master goes with the last node (a later kwok-only test must not
    find NFD rewriting the labels its fixtures give their nodes)."""
    _stop_processes(node)
    _stop_nfd_after_last(node)


def _stop_processes(node: Node) -> None:
    if node.containers_run or (node.directory / "containerd.toml").exists():
        _stop_container_node(node)
    for component in ("device-manager", "kubelet", "cri-fake"):
        stop_component(node, component)


def _stop_nfd_after_last(node: Node) -> None:
    root = node.directory.parent
    if root.name == "nodes" and not any(
        _alive(Node(d.name, d, 0), component) is not None
        for d in root.iterdir()
        if d.is_dir()
        for component in ("device-manager", "kubelet")
    ):
        stop_component(Node("nfd-master", root.parent / "nfd", 0), "nfd-master")


def _stop_container_node(node: Node) -> None:
    pid = _alive(node, "kubelet")
    netns = container_node.node_netns(pid) if pid else None
    container_node.kill_containers(node.directory)
    stop_component(node, "kubelet")
    container_node.kill_namespace(netns)
    container_node.kill_runtime(node.directory)
    stop_component(node, "relay")
    stop_component(node, "dns")
    with contextlib.suppress(ValueError):
        container_node.unwire_network(container_node.network_id(node.kubelet_port))


def remove_node(info: harness.ClusterInfo, which: Node | str) -> None:
    """Stop the node's processes (given a name: those of its state directory, if it has one), then
    delete the Node and the features the harness published for it as nfd-worker would (what the
    device manager published goes with the Node it is owned by)."""
    remove_nodes(info, [which])


def remove_nodes(info: harness.ClusterInfo, which: Iterable[Node | str]) -> None:
    """:func:`remove_node` of several nodes: their processes stopped side by side (each waits for
    its processes to exit), then one delete of the Nodes and one of their features."""
    names: list[str] = []
    found: list[Node] = []
    for item in which:
        names.append(item if isinstance(item, str) else item.name)
        known = node(info, item) if isinstance(item, str) else item
        if known is not None:
            found.append(known)
    if not names:
        return
    if found:
        with ThreadPoolExecutor(len(found)) as pool:
            list(pool.map(_stop_processes, found))
        _stop_nfd_after_last(found[-1])
    info.kubectl("delete", "node", *names, "--ignore-not-found", check=False)
    info.kubectl("delete", "nodefeature", *names, "-n", NFD_NAMESPACE, "--ignore-not-found", check=False)


def take_down(
    info: harness.ClusterInfo, op: gpustack.Operator, names: Iterable[str], timeout: float, what: str
) -> None:
    """The end of a module that ran its own nodes and a whole worker, with the worker still running:
    the nodes removed, the pools taken down by the controllers (``gpustack.take_pools_down``), the
    worker stopped and its webhook configurations deleted, then the nodes' ``Devices``."""
    names = list(names)
    remove_nodes(info, names)
    gpustack.take_pools_down(info, timeout, what)
    gpustack.stop_worker(op)
    gpustack.uninstall_webhooks(info)
    for name in names:
        info.kubectl("delete", "devices", name, "--ignore-not-found", check=False)


def cards_profile(product: str, count: int, *, unhealthy: int = 0, manufacturer: str = "nvidia") -> str:
    """A hardware profile of ``count`` cards of ``product``, the first ``unhealthy`` of them reported
    unhealthy (a critical Xid: it sticks until the device manager restarts)."""
    cards = [{"product": product, "count": count - unhealthy}]
    if unhealthy:
        cards.insert(0, {"product": product, "count": unhealthy, "unhealthy": True})
    return json.dumps({"manufacturer": manufacturer, "cards": cards})


def stop_all(info: harness.ClusterInfo | Path) -> None:
    """Stop every node process under the state dir (kubelets, fake runtimes, device managers)."""
    state = info.state_dir if isinstance(info, harness.ClusterInfo) else Path(info)
    root = state / "nodes"
    if not root.exists():
        stop_component(Node("nfd-master", state / "nfd", 0), "nfd-master")
        return
    for directory in sorted(root.iterdir()):
        if directory.is_dir():
            stop_node(_read_node(directory))
    stop_component(Node("nfd-master", state / "nfd", 0), "nfd-master")


if __name__ == "__main__":  # python tests/cluster/nodes.py stop <state dir>
    if sys.argv[1:2] == ["stop"]:
        stop_all(Path(sys.argv[2]))
