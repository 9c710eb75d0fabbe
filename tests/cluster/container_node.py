"""A real kubelet over containerd + runc: a node where Pods run as containers.

Each container node lives in a private mount and network namespace of its own
(``setsid unshare -m -n --propagation private``), started by one shell that holds it:

    host netns                               node netns (one per node)
    ----------                               -------------------------
    gsn<id>  172.31.<id>.1/30  <-- veth -->  eth0 172.31.<id>.2/30 (the node's InternalIP)
    route 10.244.<id>.0/24 via .2            cni0 10.244.<id>.1/24: the Pod network (bridge CNI)
    relay: <dir>/apiserver.sock              lo 10.96.0.1: socat 10.96.0.1:443 -> <dir>/apiserver.sock
           -> 127.0.0.1:<apiserver port>     (the ``kubernetes`` Service's ClusterIP: in-cluster
                                             clients and the kubelet reach the apiserver there)
    dns: 172.31.<id>.1:53 (service_dns.py)   the kubelet's clusterDNS: Pods resolve
                                             <service>.<namespace>.svc to its endpoints' Pod IPs
                                             (no kube-proxy routes a ClusterIP)

A Pod reaches a Pod of another container node through the host, which forwards between the nodes'
veths and nowhere else (``_route_between_nodes``).

The host's own services a Pod needs (the local Hub, the Mooncake store of ``make dev``) listen on
``HOST_ADDRESS`` (172.31.0.1, on the host's ``lo``): the same URL from the host, from a node and from
a Pod on any node (a node routes everything to the host; the host delivers it locally and routes the
answer back through the veth). Only the machine's own namespaces can reach it.

Inside, per-node directories are bind-mounted over the paths containerd and the kubelet insist on
(``/var/lib/kubelet``, ``/run/containerd``) and over the host paths the chart's DaemonSets mount
(the simulated hardware ``/var/lib/gpustack-sim``, the device manager's state), so nodes never see
each other's; the model store ``/var/lib/gpustack/models`` is a tmpfs of the node's own, a
filesystem apart as a model disk is. The apiserver reaches the kubelet and
every Pod (a webhook Service's endpoints, with ``--enable-aggregator-routing``) through the veth;
nothing leaves the machine. Images come from ``images/build.py`` and are imported into the node's
containerd under their names (no registry is reachable): ``imagePullPolicy: IfNotPresent`` uses them.

Stopping kills the containers through runc first (their shims live outside the node's process
group), then the node's processes; the namespace and the veth go with the last of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import harness
import ports

SIM_PATH = Path("/var/lib/gpustack-sim")  # the chart's deviceManager.simulate.hostPath in tests
MODELS_PATH = Path("/var/lib/gpustack/models")  # the chart's modelManager.rootPath default
MODELS_SIZE = "1g"  # the node's model cache (a tmpfs: pages are taken only as weights are written)
DM_STATE_PATH = Path("/var/lib/gpustack-operator")  # the device manager's --state-dir lives below
RUN_CONTAINERD = Path("/run/containerd")
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service (GPUSTACK_SERVICE_CIDR's first address)
HOST_ADDRESS = "172.31.0.1"  # the host as every node and Pod reaches it (no node's /30 holds it)
PODS_NETWORK = "10.244.0.0/16"  # every node's 10.244.<id>.0/24
NODES_NETWORK = "172.31.0.0/16"  # every node's 172.31.<id>.0/30
RULE_PRIORITY = 1000  # the policy rules of _route_between_nodes (before main's 32766)
STREAM_PORT = 10010
KUBELET_PORT = 10250
# Every container node carries it (the kubelet registers it): values can keep a release's Pods on them.
RUNTIME_LABEL = ("local.gpustack.dev/runtime", "containerd")
# Mount points the host needs (empty directories); each node mounts its own over them.
MOUNT_POINTS = (Path("/var/lib/kubelet"), RUN_CONTAINERD, SIM_PATH, MODELS_PATH, DM_STATE_PATH)


def network_id(kubelet_port: int) -> int:
    """The node's subnet number (172.31.<id>.0/30, 10.244.<id>.0/24): from its port slot, so nodes
    of ``make dev`` and of the e2e lanes never share one."""
    for i, name in enumerate(ports.node_ranges()):
        offset = 40 * i
        span = ports.RANGES[name]
        if span.first <= kubelet_port <= span.last:
            return 10 + offset + (kubelet_port - span.first) // ports.NODE_PORTS
    raise ValueError(f"kubelet port {kubelet_port} is in no node range of tests/cluster/ports.py")


def addresses(net: int) -> dict[str, str]:
    return {
        "veth": f"gsn{net}",
        "host": f"172.31.{net}.1",
        "node": f"172.31.{net}.2",
        "pods": f"10.244.{net}.0/24",
    }


# The runtime handlers the chart's RuntimeClasses name (values.yaml, global.manufacturers[*].runtimeName):
# a vendor's handler injects its driver into containers; the simulated cards need nothing injected,
# so each is plain runc here.
VENDOR_RUNTIMES = ("nvidia", "ascend", "cambricon", "hygon", "mthreads", "metax", "iluvatar", "amd")


def snapshotter(directory: Path) -> str:
    """``overlayfs`` where the node's directory can carry an overlay mount (layers shared, a container's
    root filesystem made in milliseconds), else ``native`` (every snapshot a full copy: 2.5 GiB for a
    node running the chart). Probed once per node directory, in a mount namespace that ends with it."""
    chosen = directory / "snapshotter"
    if chosen.exists():
        return chosen.read_text()
    probe = directory / "overlay-probe"
    parts = [probe / part for part in ("lower", "upper", "work", "merged")]
    for part in parts:
        part.mkdir(parents=True, exist_ok=True)
    lower, upper, work, merged = parts
    proc = subprocess.run(
        ["unshare", "-m", "mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    subprocess.run(["rm", "-rf", str(probe)], check=False)
    name = "overlayfs" if proc.returncode == 0 else "native"
    chosen.write_text(name)
    return name


def containerd_config(directory: Path, net: int) -> str:
    vendors = "".join(
        f"""    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}.options]
        SystemdCgroup = false
"""
        for name in VENDOR_RUNTIMES
    )
    return f"""version = 2
root = "{directory / "containerd"}"
state = "{RUN_CONTAINERD}"
[grpc]
  address = "{RUN_CONTAINERD}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "{STREAM_PORT}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{snapshotter(directory)}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
{vendors}  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{directory / "cni" / "net.d"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{directory / "containerd" / "opt"}"
"""


def cni_config(directory: Path, net: int) -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": "gpustack-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": addresses(net)["pods"]}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(directory / "cni" / "ipam"),
                },
            }
        ],
    }


def node_script(directory: Path, net: int, kubelet: Path, name: str) -> str:
    """The shell that holds the node's namespaces: mounts, network, the apiserver relay,
    containerd, then the kubelet."""
    a = addresses(net)
    mounts = [
        (directory / "kl", "/var/lib/kubelet"),
        (directory / "run", RUN_CONTAINERD),
        (directory / "sim", SIM_PATH),
        (directory / "dm-state", DM_STATE_PATH),
    ]
    lines = [
        "set -e",
        # A containerd left from a node start that failed holds the node's state: it goes first.
        f'old="^containerd --config {directory / "containerd.toml"}$"',
        'pkill -f "$old" || true',
        'i=0; while pgrep -f "$old" >/dev/null; do i=$((i+1)); [ $i -lt 200 ] || exit 5; sleep 0.05; done',
        "mount --make-rprivate /",
    ]
    lines += [f'mount --bind "{src}" "{dst}"' for src, dst in mounts]
    # The model cache on a filesystem of its own, as a node with a model disk has it: the model
    # manager's watermarks then read the cache's usage, not the host disk's (a CI disk over 80 %
    # refused every download), and the cache goes with the node's mount namespace.
    lines.append(f"mount -t tmpfs -o size={MODELS_SIZE} gpustack-models {MODELS_PATH}")
    # Bidirectional volumes (the CSI plugin's kubelet dir) need shared mounts; in this namespace only.
    lines += [
        "mount --make-rshared /",
        "ip link set lo up",
        f"ip addr add {SERVICE_IP}/32 dev lo",
        "echo 1 > /proc/sys/net/ipv4/ip_forward",
        "i=0; while ! ip link show eth0 >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 600 ] || exit 3; sleep 0.05; done",
        f"ip addr add {a['node']}/30 dev eth0",
        "ip link set eth0 up",
        f"ip route add default via {a['host']}",
        f'socat TCP-LISTEN:443,bind={SERVICE_IP},fork,reuseaddr UNIX-CONNECT:"{directory / "apiserver.sock"}" '
        f'>>"{directory / "logs" / "relay-in.log"}" 2>&1 &',
        f'containerd --config "{directory / "containerd.toml"}" >>"{directory / "logs" / "containerd.log"}" 2>&1 &',
        f"i=0; while [ ! -S {RUN_CONTAINERD}/containerd.sock ]; do i=$((i+1)); [ $i -lt 600 ] || exit 4; sleep 0.05; done",
        # containerd answers on its socket before its CRI service has recovered what it ran before
        # (a kept node: "server is not initialized yet"), and the kubelet exits on that at start. A
        # kubelet that fails within 10 s is started again, up to 60 times; one that ran longer ends
        # the node, as before.
        "n=0",
        "while :; do",
        "  t=$(date +%s)",
        f'  "{kubelet}" --config="{directory / "kubelet.yaml"}" --kubeconfig="{directory / "kubeconfig"}" '
        f"--hostname-override={name} --node-ip={a['node']} --node-labels={RUNTIME_LABEL[0]}={RUNTIME_LABEL[1]} --v=1"
        " && exit 0",
        "  rc=$?; n=$((n+1))",
        "  if [ $(( $(date +%s) - t )) -ge 10 ] || [ $n -ge 60 ]; then exit $rc; fi",
        "  sleep 1",
        "done",
    ]
    return "\n".join(lines)


def prepare(directory: Path, net: int) -> None:
    for sub in (
        "kl",
        "run",
        "sim",
        "dm-state",
        "containerd/opt",
        "cni/net.d",
        "cni/ipam",
        "logs",
        "pids",
    ):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    for point in MOUNT_POINTS:
        point.mkdir(parents=True, exist_ok=True)
    (directory / "containerd.toml").write_text(containerd_config(directory, net))
    (directory / "cni" / "net.d" / "10-gpustack.conflist").write_text(json.dumps(cni_config(directory, net)))


def kubelet_overrides(net: int) -> dict:
    """What a containerd node's KubeletConfiguration sets differently from a fake-runtime node's.
    Cluster DNS: ``service_dns.py`` on the host end of the node's veth (started with the node)."""
    return {
        "clusterDNS": [addresses(net)["host"]],
        "clusterDomain": "cluster.local",
        "address": "0.0.0.0",  # inside the node's own network namespace
        "port": KUBELET_PORT,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "containerRuntimeEndpoint": f"unix://{RUN_CONTAINERD}/containerd.sock",
    }


def wire_network(pid: int, net: int, timeout: float = 20) -> None:
    """Give the node's network namespace (that of ``pid``) its end of a veth pair; route its Pods."""
    a = addresses(net)
    deadline = time.monotonic() + timeout
    own = os.readlink("/proc/self/ns/net")
    while True:  # unshare has run once the process's namespace differs from ours
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != own:
                break
        except OSError as error:
            raise harness.ClusterError(
                f"the node process {pid} exited before its network was wired"
            ) from error
        if time.monotonic() > deadline:
            raise harness.ClusterError(f"process {pid} never entered its network namespace")
        time.sleep(0.05)
    subprocess.run(["ip", "link", "del", a["veth"]], capture_output=True)  # a leftover of a killed node
    ensure_host_address()
    for argv in (
        ["ip", "link", "add", a["veth"], "type", "veth", "peer", "name", "eth0", "netns", str(pid)],
        ["ip", "addr", "add", f"{a['host']}/30", "dev", a["veth"]],
        ["ip", "link", "set", a["veth"], "up"],
        ["ip", "route", "replace", a["pods"], "via", a["node"], "dev", a["veth"]],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise harness.ClusterError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    _route_between_nodes(a["veth"])


def _route_between_nodes(veth: str) -> None:
    """Pods of one node reach Pods of another through the host, as a cluster's Pod network lets
    them: the host forwards what arrives on the node's veth (this interface only; the machine's
    ip_forward stays as it is), to the other nodes' networks only; anything else from the node that
    is not for the host itself is unreachable, so nothing leaves the machine."""
    _unroute(veth)
    rules = [["ip", "rule", "add", "iif", veth, "to", network, "lookup", "main", "priority", str(RULE_PRIORITY)]
             for network in (PODS_NETWORK, NODES_NETWORK)]  # fmt: skip
    rules.append(["ip", "rule", "add", "iif", veth, "unreachable", "priority", str(RULE_PRIORITY + 1)])
    for argv in rules:
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise harness.ClusterError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    Path(f"/proc/sys/net/ipv4/conf/{veth}/forwarding").write_text("1")


def _unroute(veth: str) -> None:
    for priority in (RULE_PRIORITY, RULE_PRIORITY + 1):
        while subprocess.run(["ip", "rule", "del", "iif", veth, "priority", str(priority)],
                             capture_output=True).returncode == 0:  # fmt: skip
            pass


def ensure_host_address() -> None:
    """``HOST_ADDRESS`` on the host's ``lo`` (idempotent; kept: other lanes' nodes may use it)."""
    proc = subprocess.run(
        ["ip", "addr", "replace", f"{HOST_ADDRESS}/32", "dev", "lo"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise harness.ClusterError(f"ip addr replace {HOST_ADDRESS}/32 dev lo: {proc.stderr.strip()}")


def unwire_network(net: int) -> None:
    subprocess.run(["ip", "link", "del", addresses(net)["veth"]], capture_output=True)
    _unroute(addresses(net)["veth"])


def dns_argv(python: str, directory: Path, net: int, state_dir: Path, apiserver: str) -> list[str]:
    """The node's cluster DNS (``service_dns.py``) on the host end of its veth."""
    return [python, str(Path(__file__).resolve().parent / "service_dns.py"), "--listen", addresses(net)["host"],
            "--cluster-state", str(state_dir), "--server", apiserver, "--node-dir", str(directory)]  # fmt: skip


def relay_argv(directory: Path, apiserver: str) -> list[str]:
    host, port = apiserver.removeprefix("https://").rsplit(":", 1)
    return [
        "socat",
        f"UNIX-LISTEN:{directory / 'apiserver.sock'},fork,unlink-early,mode=600",
        f"TCP:{host}:{port}",
    ]


def import_images(directory: Path, archives: dict[str, Path]) -> None:
    """Import each image archive under its name into the node's containerd (``k8s.io`` namespace, what
    the kubelet sees); skipped when the same archive was imported before."""
    socket = directory / "run" / "containerd.sock"

    def answers() -> bool:  # a kept node's socket file exists before its new containerd listens
        probe = ["ctr", "--address", str(socket), "--timeout", "2s", "version"]
        return socket.exists() and subprocess.run(probe, capture_output=True, timeout=10).returncode == 0

    harness.wait_for(answers, timeout=60, what=f"containerd of {directory.name} listening")
    done_dir = directory / "imported"
    done_dir.mkdir(exist_ok=True)
    for ref, archive in archives.items():
        stamp = done_dir / f"{archive.name}.{snapshotter(directory)}"
        if stamp.exists():
            continue
        proc = subprocess.run(
            ["ctr", "--address", str(socket), "-n", "k8s.io", "images", "import", "--snapshotter", snapshotter(directory),
             "--base-name", ref.rsplit(":", 1)[0], str(archive)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if proc.returncode != 0:
            raise harness.ClusterError(f"ctr import {ref} into {directory.name}: {proc.stderr.strip()}")
        stamp.write_text(ref)


def node_netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def kill_containers(directory: Path) -> None:
    """SIGKILL every container of the node through runc (their processes are outside its session)."""
    root = directory / "run" / "runc" / "k8s.io"
    if not root.exists():
        return
    listed = subprocess.run(["runc", "--root", str(root), "list", "-q"], capture_output=True, text=True)
    for cid in listed.stdout.split():
        subprocess.run(["runc", "--root", str(root), "kill", "--all", cid, "KILL"], capture_output=True)
    for cid in listed.stdout.split():
        subprocess.run(["runc", "--root", str(root), "delete", "--force", cid], capture_output=True)


def runtime_pids(directory: Path) -> list[int]:
    """The node's containerd processes (one normally; one left behind when the kubelet died)."""
    wanted = f"containerd\0--config\0{directory / 'containerd.toml'}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes() == wanted:
                    found.append(int(entry.name))
    return found


def kill_runtime(directory: Path) -> None:
    """SIGKILL a containerd the node's kubelet left behind, and what shares its network namespace."""
    for pid in runtime_pids(directory):
        netns = node_netns(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        kill_namespace(netns)


def kill_namespace(netns: str | None) -> None:
    """SIGKILL what is left in the node's network namespace (containerd's shims, the relay)."""
    if not netns:
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(entry / "ns" / "net") == netns:
                os.kill(int(entry.name), signal.SIGKILL)


@contextlib.contextmanager
def node_port(directory: Path, address: str, port: int, target: str, log: Path) -> Iterator[None]:
    """What kube-proxy does for one NodePort, which these nodes run no kube-proxy for: inside the
    node's network namespace (that of its kubelet's shell), ``address:port`` forwards each TCP
    connection to ``target`` (``ip:port``: the endpoint the Service's EndpointSlice names). The host
    reaches ``address`` (the node's InternalIP) through the node's veth. Ends with the block; the
    node's stop kills it too (it lives in the node's namespace)."""
    pid = int((directory / "pids" / "kubelet.pid").read_text())
    argv = ["nsenter", f"--net=/proc/{pid}/ns/net", "socat",
            f"TCP-LISTEN:{port},bind={address},fork,reuseaddr", f"TCP:{target}"]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def listening() -> bool:
        if proc.poll() is not None:
            raise harness.ClusterError(f"socat for node port {address}:{port} exited: see {log}")
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=1):
            return True
        return False

    try:
        harness.wait_for(listening, timeout=30, interval=0.1, what=f"node port {address}:{port}")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # socat and the children it forked per connection
        proc.wait(timeout=10)
