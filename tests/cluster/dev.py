"""``make dev`` / ``make dev-down``: the local control plane with simulated GPU nodes and the operator
installed by its Helm chart (the worker running as the chart's ServiceAccount on the process node),
for a newcomer to ``kubectl apply`` the examples against.

    .venv/bin/python tests/cluster/dev.py up      # idempotent: a running setup is left as is
    .venv/bin/python tests/cluster/dev.py down

Nodes (``tests/cluster/nodes.py``): two real kubelet nodes over containerd + runc
(``container_node.py``) — ``gpu-sim-h100-0`` with 10 × H100 80GB HBM3 (two in MIG mode) and
``gpu-sim-a10g-0`` with 12 × A10G, sized so that every example runs at once — where the chart's
device-manager and model-manager DaemonSets run as containers of the images ``make images`` built,
and Pods really run; and, for scale, a kwok node ``gpu-t4-1`` with 4 × Tesla T4 (a pool of its own)
whose device manager (a process here: kwok runs nothing) only publishes. Labels and ``Devices`` ledgers come from the device managers, the worker and nfd-master;
the harness simulates only the hardware and what nfd-worker would report.

Everything of the operator runs as a container, as a ``helm install`` in a cluster runs it: the
worker, Kueue and Node Feature Discovery (the chart's dependencies, images built here) on the
container nodes, the node agents as DaemonSets there; the control plane runs no Kueue of its own
(``GPUSTACK_CLUSTER_KUEUE=0``). The local hub and the Mooncake store listen on
container_node.HOST_ADDRESS, which every node and Pod reaches: engines download from the hub, the
worker reaches the store. ModelDeployments run the stand-in engine (standin/) through the
model-deployment-engine-image Setting the worker's values seed; a managed KVCacheBackend runs the
store image built from the Mooncake wheel (images/build.py ``mooncake``) through
kv-cache-backend-image, and a ``vllm-router`` router the stand-in router (standin/router.py) through
model-deployment-router-image.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import contextlib

import chart
import container_node
import gpustack
import harness
import localhub
import mooncake
import nodes
import ports

from api import constants
from api.engines import SETTING_ENGINE_IMAGE
from api.setting_names import KV_CACHE_BACKEND_IMAGE, MODEL_DEPLOYMENT_ROUTER_IMAGE

DEV = harness.REPO_ROOT / ".dev"
NODES = (
    # name, profile, slot, real kubelet (over containerd)
    # The container nodes are sized so that every example runs at once (examples/README.md); the
    # kwok node is a pool of its own, so no example's Pod lands where nothing runs.
    ("gpu-sim-h100-0", "h100-10-mig2.yaml", 0, True),
    ("gpu-sim-a10g-0", "a10g-12.yaml", 1, True),
    ("gpu-t4-1", "t4-4.yaml", 2, False),
)
IMAGES = ("pause", "operator", "ssh-server", "engine", "mooncake", "router", "kueue", "nfd")
# What the examples' Pod and Instance run (docker.io/library/ubuntu:24.04): without it make dev still
# comes up, and those two wait for an image nobody can pull.
USER_IMAGES = ("ubuntu",)
TENANT = "team-a"
DEV_ZONE_LABELS = ("topology.kubernetes.io/region=dev", "topology.kubernetes.io/zone=dev-a")
STORE = DEV / "mooncake"
STORE_BACKEND = "local-mooncake"
KWOK_TAINT = "kwok.x-k8s.io/node=fake"


def _store() -> tuple[mooncake.Master, mooncake.Member]:
    """The real Mooncake master and one 256 MiB DRAM member on the host address the worker's
    container reaches (ports from GPUSTACK_MOONCAKE_DEV_{RPC,ADMIN,MEMBER,MEMBER_HTTP}_PORT)."""
    return mooncake.loopback(
        STORE, "DEV", ports.port("dev-store"), segment="256MB", host=container_node.HOST_ADDRESS
    )


def _start_store(info: harness.ClusterInfo) -> None:
    """Start the store (kept when running) and declare it as the external backend local-mooncake."""
    container_node.ensure_host_address()
    master, member = _store()
    if master.health() is None:
        master.start()
    if not member.running():
        member.start()
    info.apply(mooncake.external_backend(STORE_BACKEND, master))


HUB_PORT = int(os.environ.get("GPUSTACK_HUB_PORT", str(ports.port("dev-hub"))))
HUB_PID = DEV / "hub.pid"


def _hub_endpoint() -> str:
    return localhub.endpoint_of(HUB_PORT, container_node.HOST_ADDRESS)


def _hub(info: harness.ClusterInfo) -> str:
    """The local hub (tests/hub) with its demo repositories, on the address every node and Pod reaches."""
    import urllib.request

    container_node.ensure_host_address()
    endpoint = _hub_endpoint()
    try:
        urllib.request.urlopen(endpoint + "/_hub/health", timeout=2).close()
    except OSError:
        if HUB_PID.exists():  # an older setup's hub, on loopback only: Pods could not reach it
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(HUB_PID.read_text()), signal.SIGTERM)
        process = localhub.spawn(
            DEV / "hub",
            HUB_PORT,
            info.state_dir / "logs" / "hub.log",
            "--demo",
            host=container_node.HOST_ADDRESS,
        )
        HUB_PID.write_text(str(process.pid))
        harness.wait_for(
            lambda: localhub.HubControl(endpoint).healthy(),
            timeout=localhub.START_TIMEOUT_S,
            what="the local hub",
        )
    return endpoint


ZONES_EXAMPLE = harness.REPO_ROOT / "examples" / "20-topologysource-cloud-zones.yaml"


def _zones_serving(info: harness.ClusterInfo) -> None:
    """Apply the examples' TopologySource now and wait until every node serves its region → zone →
    hostname profile and every pool is Active again. A profile change drains the pools (the spec's
    live profile change); done here, before anything runs, ``kubectl apply -f examples/`` applies
    it unchanged and evicts nothing it admitted a moment before."""
    from api.naming import topology_profile

    info.kubectl("apply", "-f", str(ZONES_EXAMPLE))
    zoned = topology_profile(
        ["topology.kubernetes.io/region", "topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    )

    def serving() -> bool:
        label = constants.LABEL_TOPOLOGY_PROFILE
        listed = info.kubectl_json("get", "nodes")["items"]
        if {(n["metadata"].get("labels") or {}).get(label) for n in listed} != {zoned}:
            return False
        flavors = {
            f["metadata"]["name"]: (f["spec"].get("nodeLabels") or {}).get(label)
            for f in info.kubectl_json("get", "resourceflavors")["items"]
        }
        for queue in info.kubectl_json("get", "clusterqueues")["items"]:  # swapped and released
            spec = queue["spec"]
            used = [f["name"] for g in spec.get("resourceGroups") or [] for f in g.get("flavors") or []]
            if spec.get("stopPolicy", "None") != "None" or any(flavors.get(n) != zoned for n in used):
                return False
        types = info.kubectl_json("get", "instancetypes")["items"]
        return bool(types) and all((t.get("status") or {}).get("phase") == "Active" for t in types)

    harness.wait_for(serving, timeout=240, interval=1, what="every node on the cloud-zones profile")


DASHBOARD = f"127.0.0.1:{ports.port('dev-dashboard')}"
GATEWAY_PID = DEV / "gateway.pid"
GATEWAY_SOCKET = DEV / "gateway.sock"


def _dashboard(info: harness.ClusterInfo) -> str:
    """The worker-gateway over this cluster (loopback mode, subscribed as ``dev``) with its fleet
    dashboard; kept when it runs."""
    import subprocess

    url = f"https://{DASHBOARD}/"
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(GATEWAY_PID.read_text()), 0)
        return url
    GATEWAY_SOCKET.unlink(missing_ok=True)
    with open(info.state_dir / "logs" / "worker-gateway.log", "ab") as log:
        process = subprocess.Popen(
            [str(harness.REPO_ROOT / ".venv" / "bin" / "gpustack-operator"), "worker-gateway",
             "--worker-conn-mode", "loopback", "--worker-conn-kubeconfig", str(info.kubeconfig),
             "--bind-unix-path", str(GATEWAY_SOCKET), "--dashboard-address", DASHBOARD],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    GATEWAY_PID.write_text(str(process.pid))

    def subscribed() -> bool:
        if not GATEWAY_SOCKET.exists():
            return False
        curl = ["curl", "-sk", "--unix-socket", str(GATEWAY_SOCKET), "-X", "POST", "-o", "/dev/null",
                "-w", "%{http_code}", "https://gateway/apis/workers?cluster=dev"]  # fmt: skip
        return subprocess.run(curl, capture_output=True, text=True).stdout.startswith("2")

    harness.wait_for(subscribed, timeout=60, what="the worker-gateway subscribing the dev cluster")
    return url


def _setting(info: harness.ClusterInfo, name: str, value: str) -> None:
    """Set a Setting as an administrator does (the worker's env only seeds one that is absent, and a
    cluster kept from an earlier ``make dev`` has them all)."""
    info.apply(
        {
            "apiVersion": "gpustack.ai/v1",
            "kind": "Setting",
            "metadata": {"name": name, "namespace": gpustack.SYSTEM_NAMESPACE},
            "spec": {"value": value},
        }
    )


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.unlink()
    link.symlink_to(target)


def dev_values(refs: dict[str, str], hub: str) -> dict:
    """The chart's defaults (Kueue and NFD included) with every Pod of the release on the container
    nodes, the node agents reading the simulated cards there, and the Settings a newcomer needs
    seeded (GPUSTACK_<SETTING> seeds a Setting once; :func:`up` sets them on a kept cluster too)."""
    on_containers = {"nodeSelector": dict([container_node.RUNTIME_LABEL])}
    return {
        "worker": {
            **on_containers,
            "env": {
                "GPUSTACK_INSTANCE_SSH_SERVER_IMAGE": refs["ssh-server"].removeprefix("docker.io/"),
                "GPUSTACK_MODEL_DEPLOYMENT_ENGINE_IMAGE": refs["engine"].removeprefix("docker.io/"),
                "GPUSTACK_KV_CACHE_BACKEND_IMAGE": refs["mooncake"].removeprefix("docker.io/"),
                "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_IMAGE": refs["router"].removeprefix("docker.io/"),
                "GPUSTACK_MODEL_ARTIFACT_HUGGINGFACE_ENDPOINT": hub,
            },
        },
        "deviceManager": {
            **on_containers,
            "enabled": True,
            "simulate": {"hostPath": str(container_node.SIM_PATH)},
        },
        "modelManager": {**on_containers, "enabled": True},
        "cleanup": on_containers,
        "kueue": {"controllerManager": {"nodeSelector": dict([container_node.RUNTIME_LABEL])}},
        "node-feature-discovery": {"master": on_containers, "gc": on_containers},
    }


def up() -> int:
    started = time.monotonic()
    from images import build as images

    state = harness.default_state_dir()
    if (state / "process-node").is_dir() or ((state / "etcd").is_dir() and not (state / "no-kueue").exists()):
        # A setup of the older layout (Kueue and the worker as host processes): its objects and its
        # release's values would linger in etcd. Start from a clean state instead.
        print("make dev: removing the older setup in .dev/cluster (Kueue and the worker ran as processes)")
        down()
        harness.stop(state, purge=True)
    try:
        built = {name: images.build(name) for name in IMAGES}
        # A deployment without an artifact downloads its model as the engine finds it, from the
        # public Hub by default, which this machine cannot reach: make dev's engine image defaults
        # HF_ENDPOINT to the local hub (an artifact's deployment gets the Setting's, as anywhere).
        built["engine"] = images.build("engine", env=(f"HF_ENDPOINT={_hub_endpoint()}",), tag_suffix="-dev")
    except images.BuildError as error:
        print(f"make dev: {error}", file=sys.stderr)
        return 1
    for name in USER_IMAGES:
        try:
            built[name] = images.build(name)
        except images.BuildError as error:
            print(f"make dev: warning: {error}; the examples that run it will not start", file=sys.stderr)
    os.environ["GPUSTACK_CLUSTER_KUEUE"] = "0"  # the chart installs Kueue, as in a cluster
    info = harness.start()
    DEV.mkdir(exist_ok=True)
    hub = _hub(info)
    archives = dict(built.values())

    def start(name: str, profile: str, slot: int, real: bool) -> None:
        runtime = "containerd" if real else "fake"
        nodes.start_node(
            info, name, profile, slot=slot, real=real, runtime=runtime, images=archives, nfd_master=False
        )
        # What a cloud provider would label the node with: examples/20-topologysource-cloud-zones.yaml
        # turns it into a region → zone → hostname profile, which the zone-requiring example needs.
        info.kubectl("label", "node", name, "--overwrite", *DEV_ZONE_LABELS)

    for name, profile, slot, real in NODES:  # the container nodes the release runs on, first
        if real:
            start(name, profile, slot, real)
    chart.install(info, dev_values({name: ref for name, (ref, _) in built.items()}, hub), timeout=600)
    chart.wait_workers_ready(info, replicas=1, timeout=300)
    for name, profile, slot, real in NODES:  # a kwok node's device manager needs the worker's CRDs
        if not real:
            start(name, profile, slot, real)
            # Nothing runs there: kwok's own taint keeps every Pod that does not say it tolerates
            # a fake node (a KV store leader, a DaemonSet's Pod) on the nodes that run containers.
            info.kubectl("taint", "node", name, "--overwrite", f"{KWOK_TAINT}:NoSchedule")
    gpustack.ensure_namespace(info, TENANT)
    for name, _profile, _slot, _real in NODES:  # the DaemonSet's device manager publishes them
        harness.wait_for(
            lambda n=name: info.kubectl("get", "devices", n, check=False).returncode == 0,
            timeout=180,
            what=f"Devices {name} published by its device manager",
        )
    _zones_serving(info)
    _start_store(info)
    dashboard = _dashboard(info)
    # On a cluster kept from an earlier run the worker's env seeds nothing: set them as an admin does.
    _setting(info, "model-artifact-huggingface-endpoint", hub)
    _setting(info, SETTING_ENGINE_IMAGE, built["engine"][0].removeprefix("docker.io/"))
    _setting(info, KV_CACHE_BACKEND_IMAGE, built["mooncake"][0].removeprefix("docker.io/"))
    _setting(info, MODEL_DEPLOYMENT_ROUTER_IMAGE, built["router"][0].removeprefix("docker.io/"))
    (DEV / "bin").mkdir(exist_ok=True)
    _link(info.kubeconfig, DEV / "kubeconfig")
    for directory in (info.bin_dir, Path(info.endpoints.get("NODE_BIN_DIR", info.bin_dir))):
        for binary in sorted(directory.iterdir()):
            if binary.is_file() and os.access(binary, os.X_OK):
                _link(binary, DEV / "bin" / binary.name)
    deadline = time.monotonic() + 90
    types = []
    while time.monotonic() < deadline:
        types = info.kubectl_json("get", "instancetypes").get("items", [])
        if types and all((t.get("status") or {}).get("entrance") for t in types):
            break
        time.sleep(1)
    print(f"gpustack-operator dev cluster is up ({time.monotonic() - started:.0f}s).\n")
    containerd = [name for name, _p, _s, real in NODES if real]
    print(f"  nodes running containers (containerd + runc): {', '.join(containerd)}")
    print(
        "  kwok node (Pods only recorded as running): "
        + ", ".join(n for n, _p, _s, r in NODES if not r)
        + "\n"
    )
    print("  export KUBECONFIG=$PWD/.dev/kubeconfig PATH=$PWD/.dev/bin:$PATH")
    print("  kubectl get nodes,devices")
    print("  kubectl get instancetypes          # ENTRANCE is the queue name a Pod sets")
    print("  kubectl apply -f examples/")
    print(f"  kubectl get kvcb {STORE_BACKEND}   # the real Mooncake master on {container_node.HOST_ADDRESS}")
    print(f"  local hub (ModelArtifacts resolve against it): {hub}")
    print(f"  fleet dashboard (the worker-gateway's, docs/dashboard.md): {dashboard}")
    print(
        f"\n  the operator is Helm release {chart.RELEASE} in {chart.NAMESPACE}, with its Kueue and NFD, all "
        f"containers:\n  kubectl get pods -n {chart.NAMESPACE} -o wide; "
        f"kubectl logs -n {chart.NAMESPACE} deploy/{chart.RELEASE}-worker"
    )
    print(f"  cluster logs: {info.state_dir / 'logs'}   node logs: {info.state_dir / 'nodes'}/<node>/logs/")
    print("  make dev-down stops everything.")
    if not types:
        print("\nwarning: no InstanceType appeared within 90s; see the worker's log", file=sys.stderr)
        return 1
    return 0


def down() -> int:
    state = harness.default_state_dir()
    chart.stop_host(chart.Host(state, chart.SERVICE_PORT, chart.PORT_BASE))
    gpustack.stop_worker(
        gpustack.Operator(state, gpustack.WORKER_PORT, state / "operator-pki")
    )  # an older setup
    for pid_file in (HUB_PID, GATEWAY_PID):
        if pid_file.exists():
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink()
    if harness.is_running(state):
        info = harness.info(state)
        gpustack.uninstall_webhooks(info)
    nodes.stop_all(state)
    harness.stop(state)
    master, member = _store()
    member.stop()
    master.stop()
    print(
        "gpustack-operator dev cluster stopped (state kept in .dev/cluster; `tests/cluster/down.sh --purge` "
        "removes it)."
    )
    return 0


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    sys.exit({"up": up, "down": down}[command]())
