"""The worker-gateway over two real control planes, for the e2e modules that read it (the gateway's
API, its dashboard).  Not a test module.

Cluster ``east`` is the e2e cluster; ``west`` is a second control plane on its own state dir and
ports (``GPUSTACK_SECOND_CLUSTER_DIR``, ``GPUSTACK_SECOND_<NAME>_PORT``; by default the lane's
``second-cluster`` block).  Each runs the operator's worker (webhooks and controllers) and the nodes
a module names, each with its simulated hardware profile; the gateway runs as ``gpustack-operator
wg`` in kubeconfig-directory mode on a unix socket, read over HTTPS as the GPUStack server reads it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import gpustack
import harness
import httpx
import nodes
from ports import e2e_prefix

from tests.e2e import second_cluster

EAST, WEST = "east", "west"
H100_TYPE = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"


@dataclass(frozen=True)
class NodeSpec:
    profile: str  # its hardware profile in tests/cluster/profiles
    slot: int  # its ports' slot (a kwok node: its device manager's; a real node: the kubelet's too)
    real: bool = False  # a real kubelet (Pods run on it) or a kwok node


Layout = Mapping[str, Mapping[str, NodeSpec]]  # cluster -> node name -> spec


def instance_types(info: harness.ClusterInfo) -> dict[str, dict]:
    return {t["metadata"]["name"]: t for t in info.kubectl_json("get", "instancetypes")["items"]}


def h100_remaining(info: harness.ClusterInfo) -> int:
    status = instance_types(info).get(H100_TYPE, {}).get("status") or {}
    return int((status.get("accelerator") or {}).get("remaining") or -1)


@dataclass
class Member:
    name: str
    info: harness.ClusterInfo
    operator: gpustack.Operator
    nodes: Mapping[str, NodeSpec] = field(default_factory=dict)


@dataclass
class Fleetside:
    members: dict[str, Member]
    socket: Path
    process: subprocess.Popen
    log: Path
    dashboard: str = ""  # the dashboard's URL, when the gateway serves one

    def client(self, timeout: float = 30) -> httpx.Client:
        transport = httpx.HTTPTransport(uds=str(self.socket), verify=False)
        return httpx.Client(transport=transport, base_url="https://gpustack-operator", timeout=timeout)


def _member_up(name: str, info: harness.ClusterInfo, port: int, layout: Mapping[str, NodeSpec]) -> Member:
    op = gpustack.install(info, port=port)
    gpustack.start_worker(info, op)
    member = Member(name, info, op, layout)
    for node, spec in layout.items():
        nodes.start_node(info, node, spec.profile, slot=spec.slot, real=spec.real)
    harness.wait_for(
        lambda: h100_remaining(info) == 8, timeout=120, what=f"{name}: the H100 InstanceType at 8/8"
    )
    return member


def _member_down(member: Member) -> None:
    info = member.info
    if not harness.is_running(info.state_dir):  # its apiserver was stopped: nothing to clean there
        nodes.stop_all(info)  # but the node agents' processes still run
        gpustack.stop_worker(member.operator)
        return
    with contextlib.suppress(Exception):
        nodes.remove_nodes(info, member.nodes)
        info.kubectl("delete", "instancetypes", "--all", "--wait=false", check=False)
        harness.wait_for(lambda: not instance_types(info), timeout=90, what="types gone")
    gpustack.stop_worker(member.operator)
    with contextlib.suppress(Exception):
        gpustack.uninstall_webhooks(info)
        for node in member.nodes:
            info.kubectl("delete", "devices", node, "--ignore-not-found", check=False)


def _gateway_up(tmp: Path, configs: Path, extra: tuple[str, ...]) -> tuple[subprocess.Popen, Path, Path]:
    socket = tmp / "run" / "gateway.sock"
    log = tmp / "gateway.log"
    process = subprocess.Popen(
        [
            gpustack.PYTHON,
            "-m",
            "gpustack_operator",
            "wg",
            "--bind-unix-path",
            str(socket),
            "--worker-conn-mode",
            "kubeconfig-dir",
            "--worker-conn-kubeconfig-dir",
            str(configs),
            "--worker-readiness-check-timeout",
            "10s",
            "--v=2",
            *extra,
        ],
        cwd=gpustack.REPO,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return process, socket, log


def ready(side: Fleetside) -> bool:
    if side.process.poll() is not None:
        raise harness.ClusterError(f"the gateway exited ({side.process.returncode}); see {side.log}")
    try:
        with side.client(timeout=2) as client:
            return client.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def fleet(
    cluster: harness.ClusterInfo, tmp: Path, layout: Layout, gateway_args: tuple[str, ...] = ()
) -> Iterator[Fleetside]:
    """Both clusters with the nodes of ``layout``, and the gateway over them (``gateway_args`` added
    to its command line); everything is taken down again after."""
    foreign = [
        n["metadata"]["name"]
        for n in cluster.kubectl_json("get", "nodes", "-l", "gpustack.ai/managed=true")["items"]
        if n["metadata"]["name"] not in layout[EAST]
    ]
    if foreign:
        raise AssertionError(
            f"e2e gateway: the cluster already has managed nodes {foreign}; these tests own the pools"
            + " (an earlier module left them behind)"
        )
    second_dir = Path(
        os.environ.get("GPUSTACK_SECOND_CLUSTER_DIR") or second_cluster.state_dir(f"{e2e_prefix()}-second")
    ).resolve()
    ports = second_cluster.port_env()
    second = second_cluster.start(second_dir, ports)
    configs = tmp / "clusters"
    configs.mkdir()
    (configs / f"{EAST}.yaml").write_text(cluster.kubeconfig.read_text())
    (configs / f"{WEST}.yaml").write_text(second.kubeconfig.read_text())
    members: dict[str, Member] = {}
    process = None
    try:
        members[EAST] = _member_up(EAST, cluster, gpustack.WORKER_PORT, layout[EAST])
        members[WEST] = _member_up(WEST, second, int(ports["GPUSTACK_WORKER_PORT"]), layout[WEST])
        process, socket, log = _gateway_up(tmp, configs, gateway_args)
        side = Fleetside(members, socket, process, log)
        harness.wait_for(lambda: ready(side), timeout=60, what=f"the gateway ready (log {log})")
        yield side
    finally:
        if process is not None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
        for member in members.values():
            _member_down(member)
        second_cluster.stop(second, second_dir, ports)


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts: it serves nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stop_apiserver(info: harness.ClusterInfo) -> None:
    """An outage: the cluster's apiserver is killed at once (one already stopped stays stopped)."""
    pid = int((info.state_dir / "pids" / "kube-apiserver.pid").read_text().strip())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    harness.wait_for(lambda: gone(pid), timeout=60, what=f"{info.state_dir.name}'s apiserver stopped")


def registered(client: httpx.Client) -> dict[str, str]:
    return {w["cluster"]: w["state"] for w in client.get("/apis/workers").json()["items"]}
