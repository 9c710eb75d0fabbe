"""The operator as an administrator runs it: its own images, built here (``images/build.py``), run as
containers on a real kubelet over containerd + runc (``tests/cluster/container_node.py``), installed
by ``helm install`` of the chart — Kueue and NFD included, as its dependencies — with nothing but the
values a cluster without accelerators needs (the simulated cards' host path, and where to schedule).
No process of the checkout stands in for a Pod of the release.

The module runs on a control plane of its own (``second_cluster``: the lane's second port block)
started without the harness's Kueue (``GPUSTACK_CLUSTER_KUEUE=0``) and without its nfd-master: the
chart's Kueue, started from the configuration the chart renders, and the chart's NFD are the only
ones. The harness still publishes the NodeFeature nfd-worker would publish for the simulated card's
PCI vendor (the real nfd-worker container finds this machine's own PCI devices, none of them a GPU).

Checked, in order (each test is the next step of one installation):
1. every Pod of the release — worker, device manager, model manager, Kueue, nfd-master, nfd-worker,
   nfd-gc — runs in a container (``containerd://``) with the security context the chart rendered,
   read from inside for ours: the worker as 65532 with no capabilities on a read-only root, the node
   agents as root with what they need; the device manager registered the simulated cards with the
   kubelet and the model manager its CSI driver; the apiserver reaches the worker's webhooks through
   its Service; NFD labelled the node with the PCI vendor;
2. a whole-card Pod, a slice and a MIG device go through the five gates (the containerised Kueue
   admits them) and run on the container node; the visibility the device manager's ``Allocate``
   handed them is read from inside (``kubectl exec``), the MIG device one the containerised device
   manager created through the simulated NVML;
   then an Instance of each kind with a key made by ``ssh-keygen``: the sidecar image built here runs
   sshd, a real ``ssh`` login (at the Pod's address; then at the status's address and node port,
   through a stand-in for kube-proxy) enters ``main`` and sees its card, slice or MIG device, and a
   second key is refused;
3. a ModelDeployment of a ModelArtifact serves for real: the worker container resolves the artifact
   against the local Hub (reached at the host address every node and Pod shares), the deployment's
   Pod runs the stand-in engine image (``standin/``, chosen by the engine-image Setting the chart's
   values seed) with the command line the controller rendered, downloads the weights from the Hub,
   passes its probes, and the deployment turns Ready; ``/v1/models`` on the Pod answers the served
   name and a chat completion comes back;
4. with the delivery mode Setting at ``Node``, the model-manager container downloads the artifact
   and publishes it through CSI into the engine's container, which reads the weights there;
5. a prefill/decode deployment with ``spec.router`` ``vllm-router`` turns Ready with its router: the
   router Pod runs the stand-in router image (``standin/router.py``, chosen by the router-image
   Setting the values seed) with the command line the controller rendered, finds the prefill and
   decode Pods through the Kubernetes API with its service-account token, and a chat request at the
   router Service's endpoint is sent to the prefill replica (one token) and then to the decode
   replica, whose completion comes back (no KV cache moves: the engines are stand-ins);
6. a managed KVCacheBackend runs the store image built here from the Mooncake wheel (the
   kv-cache-backend-image Setting the values seed): its leader (``mooncake_master``) and its member
   (``mc_store_rest_server``) run as containers with the command lines the controller rendered, the
   backend turns Ready with the member's segment mounted, a KVCachePool and a KVCachePoolBinding turn
   Ready against the master's ledger, and a ModelDeployment on the pool gets the client
   configuration, whose master address resolves (the node's cluster DNS stand-in,
   ``tests/cluster/service_dns.py``) to the leader Pod, which answers from the host and from the
   engine's container;
7. ``helm uninstall`` removes the release's Pods (the containers with them).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import urllib.error
import urllib.request
import uuid

import chart
import container_node
import harness
import localhub
import nodes
import ports
import pytest
import reach
import yaml

from api import allocation, constants
from api import delivery as d
from api import kvcache as kv
from images import build as images
from tests.e2e import second_cluster
from tests.e2e.objects import queued_pod, requesting, wait_for_entrance
from tests.net import free_port

from .conftest import ensure_namespace

pytestmark = pytest.mark.e2e

NODE = "ct-h100"
SLOT = 31
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
NS = f"containers-{uuid.uuid4().hex[:5]}"
SYSTEM = chart.NAMESPACE
ON_NODE = {"nodeSelector": {"kubernetes.io/hostname": NODE}}
OPERATOR_IMAGE = images.IMAGES["operator"].ref.removeprefix("docker.io/")
ENGINE_IMAGE = images.IMAGES["engine"].ref.removeprefix("docker.io/")
ROUTER_IMAGE = images.IMAGES["router"].ref.removeprefix("docker.io/")
SSH_IMAGE = images.IMAGES["ssh-server"].ref.removeprefix("docker.io/")
STORE_IMAGE = images.IMAGES["mooncake"].ref.removeprefix("docker.io/")
HUB_PORT = free_port()
HUB = localhub.endpoint_of(HUB_PORT, container_node.HOST_ADDRESS)
MODEL = "Qwen/Qwen2.5-7B-Instruct"  # one of the local Hub's demo repositories
VALUES = {
    # GPUSTACK_<SETTING> seeds each Setting when the worker first starts, as an administrator would.
    "worker": {
        **ON_NODE,
        "env": {
            "GPUSTACK_MODEL_DEPLOYMENT_ENGINE_IMAGE": ENGINE_IMAGE,
            "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_IMAGE": ROUTER_IMAGE,
            "GPUSTACK_INSTANCE_SSH_SERVER_IMAGE": SSH_IMAGE,
            "GPUSTACK_KV_CACHE_BACKEND_IMAGE": STORE_IMAGE,
            "GPUSTACK_MODEL_ARTIFACT_HUGGINGFACE_ENDPOINT": HUB,
        },
    },
    "deviceManager": {**ON_NODE, "simulate": {"hostPath": str(nodes.container_node.SIM_PATH)}},
    "modelManager": ON_NODE,
    "cleanup": ON_NODE,
}
WAIT = 240


@pytest.fixture(scope="module")
def installed():
    """The images built, a control plane without Kueue, a container node with the images, and the
    chart — with its Kueue and NFD — installed onto it."""
    built = dict(
        images.build(name)
        for name in ("pause", "operator", "kueue", "nfd", "engine", "router", "ssh-server", "mooncake")
    )
    directory = second_cluster.state_dir(f"{ports.e2e_prefix()}-containers")
    env = {**second_cluster.port_env(), "GPUSTACK_CLUSTER_KUEUE": "0"}
    cluster = second_cluster.start(directory, env)
    hub = contextlib.ExitStack()
    try:
        container_node.ensure_host_address()
        hub.enter_context(
            localhub.serving(directory / "hub", HUB_PORT, directory / "logs" / "hub.log", "--demo",
                             host=container_node.HOST_ADDRESS)
        )  # fmt: skip
        with second_cluster.environment(env):
            nodes.start_node(
                cluster,
                NODE,
                "h100-8-mig2.yaml",
                slot=SLOT,
                runtime="containerd",
                images=built,
                nfd_master=False,
            )
        chart.install(cluster, VALUES, timeout=WAIT)
        yield cluster
    finally:
        # Each step whatever the one before did (a hung uninstall must not leave the node running).
        with contextlib.suppress(Exception):
            harness.delete_namespace(cluster, NS, timeout=120)
        with contextlib.suppress(Exception):
            if chart.installed(cluster):
                chart.helm(cluster, "uninstall", chart.RELEASE, "--namespace", SYSTEM, "--wait", check=False)
        try:
            nodes.remove_node(cluster, NODE)
        finally:
            second_cluster.stop(cluster, directory, env)
            hub.close()


def release_pods(cluster: harness.ClusterInfo) -> list[dict]:
    selector = f"app.kubernetes.io/instance={chart.RELEASE}"
    return cluster.kubectl_json("get", "pods", "-n", SYSTEM, "-l", selector)["items"]


def component(pod: dict) -> str:
    """Ours and NFD's say app.kubernetes.io/component (NFD: master, worker, gc); Kueue's say
    control-plane: controller-manager."""
    labels = pod["metadata"]["labels"]
    if labels.get("app.kubernetes.io/name") == "kueue":
        return "kueue"
    if labels.get("app.kubernetes.io/name") == "node-feature-discovery":
        return f"nfd-{labels.get('role') or labels.get('app.kubernetes.io/component')}"
    return labels["app.kubernetes.io/component"]


def ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


OURS = {"worker", "device-manager-nvidia", "model-manager"}
DEPENDENCIES = {"kueue": "registry.k8s.io/kueue/kueue:v0.19.0",
                "nfd": "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"}  # fmt: skip


def all_ready(cluster: harness.ClusterInfo) -> dict[str, dict] | None:
    """Every Pod of the release by component (Kueue's and NFD's included) once all are Ready."""
    pods = {component(p): p for p in release_pods(cluster) if not p["metadata"].get("deletionTimestamp")}
    found = set(pods)
    kueue = {c for c in found if c.startswith("kueue")}
    nfd = {c for c in found if c in ("master", "worker-nfd", "gc") or "nfd" in c}
    if found >= OURS and kueue and nfd and all(ready(p) for p in pods.values()):
        return pods
    return None


def exec_in(cluster: harness.ClusterInfo, pod: str, namespace: str, script: str, container: str = "") -> str:
    argv = ["exec", pod, "-n", namespace, *(["-c", container] if container else []), "--", "sh", "-c", script]
    return cluster.kubectl(*argv, timeout=60).stdout


def status_field(text: str, field: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(field + ":"))


def test_every_pod_of_the_release_runs_in_a_container_with_the_rendered_security(installed) -> None:
    cluster = installed
    pods = harness.wait_for(
        lambda: all_ready(cluster), timeout=WAIT, interval=1, what="the release's Pods Ready"
    )
    for name, pod in pods.items():
        assert pod["spec"]["nodeName"] == NODE, name
        for status in pod["status"]["containerStatuses"]:
            assert status["containerID"].startswith("containerd://"), (name, status["containerID"])
            wanted = DEPENDENCIES.get(name.split("-")[0], OPERATOR_IMAGE)
            assert status["image"].endswith(wanted), (name, status["image"])
    # Kueue's and NFD's Pods run with the security their charts render: Kueue's and nfd-master's
    # and nfd-worker's say runAsNonRoot, which the kubelet checks against the image's user before it
    # starts the container (they are Ready above: the images built here run as non-root users).
    non_root = {
        n
        for n, p in pods.items()
        if {
            **(p["spec"].get("securityContext") or {}),
            **(p["spec"]["containers"][0].get("securityContext") or {}),
        }.get("runAsNonRoot")
    }
    assert {"kueue", "nfd-master", "nfd-worker"} <= non_root, sorted(non_root)

    worker = pods["worker"]
    rendered = worker["spec"]["containers"][0]["securityContext"]
    assert rendered == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}}  # fmt: skip
    inside = exec_in(cluster, worker["metadata"]["name"], SYSTEM,
                     "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; touch /probe 2>&1 || true")  # fmt: skip
    assert inside.splitlines()[0] == "65532"
    assert status_field(inside, "CapEff") == "0000000000000000"
    assert status_field(inside, "NoNewPrivs") == "1"
    assert "Read-only file system" in inside

    for agent in ("device-manager-nvidia", "model-manager"):
        pod = pods[agent]
        context = pod["spec"]["containers"][0]["securityContext"]
        assert context["privileged"] is True and context["runAsUser"] == 0, (agent, context)
        inside = exec_in(cluster, pod["metadata"]["name"], SYSTEM, "id -u; grep CapEff /proc/self/status")
        assert inside.splitlines()[0] == "0", agent
        assert int(status_field(inside, "CapEff"), 16) & (1 << 21), agent  # CAP_SYS_ADMIN: mounts, MIG

    # The device manager registered the simulated cards with the kubelet; the plugin its CSI driver.
    node = cluster.kubectl_json("get", "node", NODE)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "6"  # 8 H100s, two of them in MIG mode
    assert harness.wait_for(
        lambda: cluster.kubectl("get", "devices", NODE, check=False).returncode == 0, timeout=60,
        what="the Devices the device manager container published",
    )  # fmt: skip
    drivers = cluster.kubectl_json("get", "csinode", NODE)["spec"]["drivers"] or []
    assert constants.CSI_DRIVER_MODEL in [d["name"] for d in drivers]
    log = cluster.kubectl("logs", "-n", SYSTEM, pods["device-manager-nvidia"]["metadata"]["name"]).stdout
    assert "registered" in log.lower(), log[-2000:]

    # The worker's webhooks, reached by the apiserver through the chart's Service.
    config = cluster.kubectl_json("get", "mutatingwebhookconfiguration", "gpustack-worker-mutation")
    service = config["webhooks"][0]["clientConfig"]["service"]
    assert (service["namespace"], service["name"]) == (SYSTEM, f"{chart.RELEASE}-worker")

    # Kueue started from the configuration the chart rendered, unchanged: its ConfigMap is the chart's.
    ours = cluster.kubectl_json("get", "configmap", f"{chart.RELEASE}-kueue-manager-config", "-n", SYSTEM)
    theirs = cluster.kubectl_json("get", "configmap", "kueue-manager-config", "-n", SYSTEM)
    assert yaml.safe_load(theirs["data"]["controller_manager_config.yaml"]) == yaml.safe_load(
        ours["data"]["controller_manager_config.yaml"]
    )
    # NFD's master labelled the node from the NodeFeatures (the simulated card's vendor, and the
    # label namespaces the chart lets it write: the worker's NodeFeatureRule).
    labels = cluster.kubectl_json("get", "node", NODE)["metadata"]["labels"]
    assert labels.get("feature.node.kubernetes.io/pci-10de.present") == "true", sorted(labels)


def pod(name: str, queue: str, limits: dict[str, str]) -> dict:
    """A queued Pod whose container really runs: the operator image, sleeping."""
    container = {
        **requesting(limits),
        "image": OPERATOR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "infinity"],
    }
    return queued_pod(name, NS, queue, container)


def running(cluster: harness.ClusterInfo, name: str) -> dict | None:
    found = cluster.kubectl_json("get", "pod", name, "-n", NS)
    statuses = (found.get("status") or {}).get("containerStatuses") or []
    return found if statuses and statuses[0].get("state", {}).get("running") else None


def test_a_whole_card_a_slice_and_a_mig_device_run_in_containers_that_see_their_visibility(installed) -> None:
    cluster = installed
    ensure_namespace(cluster, NS)
    queue = wait_for_entrance(cluster, POOL, NS, timeout=WAIT, what="the H100 pool's entrance")
    cluster.apply(pod("whole", queue, {"nvidia.com/gpu": "1"}))
    cluster.apply(
        pod("slice", queue, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"})
    )
    cluster.apply(
        pod(
            "partition",
            queue,
            {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"},
        )
    )
    seen = {}
    for name in ("whole", "slice", "partition"):
        found = harness.wait_for(lambda n=name: running(cluster, n), timeout=WAIT, what=f"Pod {name} running")
        assert found["spec"]["nodeName"] == NODE
        assert found["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
        env = dict(
            line.split("=", 1) for line in exec_in(cluster, name, NS, "env").splitlines() if "=" in line
        )
        seen[name] = env
    # One card each, named as the node's Devices name its simulated cards: the device manager
    # container's Allocate answer reached the container's environment through containerd.
    ledger = json.dumps(cluster.kubectl_json("get", "devices", NODE))
    # The MIG device: a GPU instance the containerised device manager made through the simulated
    # NVML, which keeps its instances beside the profile on the node's host path (as a card's outlive
    # the driver's clients) — the container sees that instance, never its parent card.
    mig = seen.pop("partition").get("NVIDIA_VISIBLE_DEVICES", "")
    assert mig.startswith("MIG-") and "," not in mig, mig
    instances = (nodes.node_directory(cluster, NODE) / "sim" / "profile.instances.json").read_text()
    assert mig.removeprefix("MIG-") in instances or mig in instances, (mig, instances[:500])
    for name, env in seen.items():
        visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
        assert visible.startswith("GPU-") and "," not in visible, (name, sorted(env))
        assert visible in ledger, (name, visible)
        assert env.get("CUDA_VISIBLE_DEVICES") == "0", (name, env.get("CUDA_VISIBLE_DEVICES"))


# --- SSH into an Instance -------------------------------------------------------------------------

# What a session prints: the card variables, where it runs (main's image has the operator's entrypoint,
# the sidecar's has not) and the working directory (the workspace).
PROBE = (
    'echo "nvidia=$NVIDIA_VISIBLE_DEVICES"; echo "cuda=$CUDA_VISIBLE_DEVICES"; echo "pwd=$(pwd)"; '
    'echo "main=$(test -x /usr/local/bin/gpustack-operator && echo yes || echo no)"; echo "host=$(hostname)"'
)


def fields(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def environment_of(cluster: harness.ClusterInfo, pod: str, container: str) -> dict[str, str]:
    return fields(exec_in(cluster, pod, NS, "env", container=container))


def ssh_instance(name: str, resources: dict) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": POOL, "image": OPERATOR_IMAGE, "command": ["sleep", "infinity"],
                 "sshPublicKey": {"name": "user-key"}, "resources": resources,
                 "volume": {"ephemeral": {"capacity": "1Gi"}}},
    }  # fmt: skip


def instance_reachable(cluster: harness.ClusterInfo, name: str) -> dict | None:
    """The Instance once Ready with its Pod IP, its access address and the ssh port's node port."""
    found = cluster.kubectl_json("get", "instance", name, "-n", NS)
    status = found.get("status") or {}
    ssh_port = [p for p in status.get("ports") or [] if p.get("name") == "ssh" and p.get("nodePort")]
    if status.get("phase") == "Ready" and status.get("podIPs") and status.get("accessAddresses") and ssh_port:
        return found
    return None


def test_ssh_into_an_instance_enters_main_and_sees_its_card_slice_or_mig_device(installed, tmp_path) -> None:
    cluster = installed
    ensure_namespace(cluster, NS)
    wait_for_entrance(cluster, POOL, NS, timeout=WAIT, what="the H100 pool's entrance")
    key, public = reach.keygen(tmp_path, "user")
    wrong, _ = reach.keygen(tmp_path, "stranger")
    cluster.apply({"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceSSHPublicKey",
                   "metadata": {"name": "user-key", "namespace": NS}, "spec": {"data": public}})  # fmt: skip
    wanted = {
        "ssh-whole": {"accelerator": "1"},
        "ssh-slice": {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 40},
        "ssh-mig": {"accelerator": "1", "acceleratorPartitionedProfile": "3g.40gb"},
    }
    for name, resources in wanted.items():
        cluster.apply(ssh_instance(name, resources))
    node_ip = container_node.addresses(container_node.network_id(nodes.node(cluster, NODE).kubelet_port))[
        "node"
    ]
    for name in wanted:
        try:
            found = harness.wait_for(lambda n=name: instance_reachable(cluster, n), timeout=WAIT,
                                     what=f"Instance {name} Ready with its addresses")  # fmt: skip
        except TimeoutError:
            listed = cluster.kubectl("get", "instances,pods,services", "-n", NS, "-o", "wide").stdout
            described = cluster.kubectl("describe", "pod", name, "-n", NS, check=False).stdout
            logs = cluster.kubectl("logs", name, "-c", "sshd", "-n", NS, check=False).stdout
            raise AssertionError(
                f"{name} not Ready:\n{listed}\n{described[-4000:]}\n{logs[-2000:]}"
            ) from None
        status = found["status"]
        main = environment_of(cluster, name, constants.INSTANCE_CONTAINER_MAIN)
        sidecar = environment_of(cluster, name, constants.INSTANCE_CONTAINER_SSHD)
        visible = main.get("NVIDIA_VISIBLE_DEVICES", "")
        # The card the device manager handed main: a MIG device for the partition (never its parent).
        assert visible.startswith("MIG-" if name == "ssh-mig" else "GPU-") and "," not in visible, (
            name,
            visible,
        )
        assert sidecar.get("NVIDIA_VISIBLE_DEVICES") == visible, (name, sidecar.get("NVIDIA_VISIBLE_DEVICES"))

        # A real login at the Pod's address (the host routes to the node's Pod network), port 22.
        (pod_ip,) = [entry["ip"] for entry in status["podIPs"]]
        session = reach.ssh_answering(key, pod_ip, PROBE, port=constants.SSH_PORT)
        assert session.returncode == 0, (name, session.stderr[-2000:])
        seen = fields(session.stdout)
        assert seen["nvidia"] == visible, (name, seen)
        assert seen["cuda"] == main.get("CUDA_VISIBLE_DEVICES") == "0", (
            name,
            seen,
            main.get("CUDA_VISIBLE_DEVICES"),
        )
        # The session runs in main, not in the sidecar: main's filesystem, in the workspace.
        assert seen["main"] == "yes" and seen["pwd"] == "/workspace", (name, seen)
        assert seen["host"] == name, (name, seen)

        # An interactive login (a terminal, no command): main's login shell, in the workspace.
        shell = reach.ssh(
            key,
            pod_ip,
            "",
            port=constants.SSH_PORT,
            terminal='echo "shell=$NVIDIA_VISIBLE_DEVICES:$(pwd)"; exit\n',
        )
        assert f"shell={visible}:/workspace" in shell.stdout, (
            name,
            shell.stdout[-2000:],
            shell.stderr[-2000:],
        )

        # A file written over SSH is in main's workspace.
        marker = f"written over ssh to {name}"
        wrote = reach.ssh(key, pod_ip, f"echo '{marker}' > /workspace/marker", port=constants.SSH_PORT)
        assert wrote.returncode == 0, wrote.stderr[-2000:]
        assert exec_in(cluster, name, NS, "cat /workspace/marker", container="main").strip() == marker

        # A key the Instance does not hold is refused.
        refused = reach.ssh(wrong, pod_ip, "true", port=constants.SSH_PORT)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, (name, refused.stderr)

        # The address the status reports: the node's address and the ssh port's node port, through
        # the Service's endpoint (the local nodes run no kube-proxy: container_node.node_port stands
        # in for it, for this one port, from the Service's EndpointSlice).
        (address,) = status["accessAddresses"]
        assert address == node_ip, (address, node_ip)
        (node_port,) = [p["nodePort"] for p in status["ports"] if p["name"] == "ssh"]
        target = reach.service_endpoint(cluster, NS, name, "tcp-22")
        assert target == f"{pod_ip}:{constants.SSH_PORT}", target
        log = nodes.node_directory(cluster, NODE) / "logs" / f"node-port-{node_port}.log"
        with container_node.node_port(nodes.node_directory(cluster, NODE), address, node_port, target, log):
            session = reach.ssh_answering(key, address, PROBE, port=node_port)
            assert session.returncode == 0, (name, session.stderr[-2000:])
            assert fields(session.stdout)["nvidia"] == visible
            refused = reach.ssh(wrong, address, "true", port=node_port)
            assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr


def test_a_model_deployment_of_an_artifact_serves_from_the_stand_in_engine(installed) -> None:
    cluster = installed
    ensure_namespace(cluster, NS)
    cluster.apply({
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelArtifact",
        "metadata": {"name": "qwen", "namespace": NS},
        "spec": {"source": {"huggingFace": {"repository": MODEL, "revision": "main"}}},
    })  # fmt: skip
    cluster.apply({
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {
            "model": {"name": MODEL, "artifactRef": {"name": "qwen"}},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [{"name": "server", "instanceType": POOL, "resources": {"accelerator": 1}}],
        },
    })  # fmt: skip

    server, base = serve_ready(cluster, "chat")
    main = next(c for c in server["spec"]["containers"] if c["name"] == "main")
    assert main["image"] == ENGINE_IMAGE and main["command"][:2] == ["vllm", "serve"]
    assert server["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    # The host routes to the node's Pod network: the Pod answers at its own address.
    assert [m["id"] for m in reach.http(f"{base}/v1/models")["data"]] == [MODEL]
    answer = reach.http(f"{base}/v1/chat/completions",
                  {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})  # fmt: skip
    assert len(answer["choices"][0]["message"]["content"].split()) == 4
    about = reach.http(f"{base}/standin")
    # The weights came from the Hub into the Pod's cache (Engine delivery), and the card the device
    # manager allocated is the one the engine sees.
    assert about["weights"]["files"] >= 1 and about["weights"]["path"].startswith("/")
    visible = about["devices"].get("NVIDIA_VISIBLE_DEVICES", "")
    assert visible.startswith("GPU-") and visible in json.dumps(cluster.kubectl_json("get", "devices", NODE))


def cards_and_promises(cluster: harness.ClusterInfo) -> str:
    """What gate 3 weighs on the node, for a failure's message: the device manager's ledger, one line
    a card; every Pod on the node with the cards its allocation record names (a Pod deleted or
    finished that still holds a card shows here); every Workload with its admission and check state
    (a promise without Pods shows here); and the device manager's allocations and warnings."""
    status = cluster.kubectl_json("get", "devices", NODE).get("status") or {}
    cards = []
    for group in status.get("groups") or []:
        for card in group.get("accelerators") or []:
            rest = {
                k: v for k, v in card.items() if k not in ("id", "index", "mode", "allocated", "remaining")
            }
            cards.append(
                f"  {card.get('index')} {card.get('id', '')[-8:]} mode={card.get('mode')} "
                f"allocated={card.get('allocated')} remaining={card.get('remaining')} {json.dumps(rest, sort_keys=True)[:300]}"
            )
    holders = []
    for pod in cluster.kubectl_json("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE}")[
        "items"
    ]:
        meta, record = pod["metadata"], allocation.record_of(pod)
        if record:
            held = {c: [a["id"][-8:] for g in groups for a in g.get("accelerators") or []]
                    for c, groups in record.items()}  # fmt: skip
            holders.append(
                f"  {meta['namespace']}/{meta['name']} {pod['status'].get('phase')}"
                f"{' deleting' if meta.get('deletionTimestamp') else ''} {held}"
            )
    columns = (
        "NAME:.metadata.name,OWNERS:.metadata.ownerReferences[*].name,ADMITTED:.status.conditions[?(@.type=="
        '"Admitted")].status,FINISHED:.status.conditions[?(@.type=="Finished")].status,'
        "CHECKS:.status.admissionChecks[*].state,DELETING:.metadata.deletionTimestamp"
    )
    workloads = cluster.kubectl(
        "get", "workloads", "-A", "-o", f"custom-columns={columns}", check=False
    ).stdout
    manager = cluster.kubectl(
        "logs", "-n", SYSTEM, "-l", "gpustack.ai/device-manager=true", "--tail=400", check=False
    ).stdout
    said = [
        line[:300]
        for line in manager.splitlines()
        if '"msg":"allocated"' in line or any(f'"level":"{level}"' in line for level in ("warning", "error"))
    ]
    return "\n".join(
        [f"Devices {NODE}, one card a line:", *cards, "Pods on the node with an allocation record:", *holders,
         f"Workloads:\n{workloads}", "Device manager, allocations and warnings:", *said[-30:]]
    )  # fmt: skip


def serve_ready(cluster: harness.ClusterInfo, name: str) -> tuple[dict, str]:
    """The deployment's one Pod, once the deployment is Ready, and the engine's base URL."""

    def deployment_ready() -> dict | None:
        found = cluster.kubectl_json("get", "modeldeployment", name, "-n", NS)
        return found if (found.get("status") or {}).get("phase") == "Ready" else None

    selector = f"{constants.LABEL_APP_INSTANCE}={name}"
    try:
        harness.wait_for(deployment_ready, timeout=WAIT, what=f"{name} Ready")
    except TimeoutError:
        listed = cluster.kubectl("get", "pods,modeldeployment,modelartifact", "-n", NS, "-o", "wide").stdout
        logs = cluster.kubectl("logs", "-n", NS, "-l", selector, "--tail=40", check=False).stdout
        events = cluster.kubectl("get", "events", "-n", NS, "--sort-by=.lastTimestamp", check=False).stdout
        stores = cluster.kubectl("get", "nodemodelstores", "-o", "yaml", check=False).stdout
        raise AssertionError(
            f"{name} not Ready:\n{listed}\n{logs}\n{events[-4000:]}\n{stores[-3000:]}\n{cards_and_promises(cluster)}"
        ) from None
    pods = [p for p in cluster.kubectl_json("get", "pods", "-n", NS, "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp") and ready(p)]  # fmt: skip
    (server,) = pods
    main = next(c for c in server["spec"]["containers"] if c["name"] == "main")
    return (
        server,
        f"http://{server['status']['podIP']}:{main['command'][main['command'].index('--port') + 1]}",
    )


def test_node_delivery_publishes_the_weights_from_the_model_manager_container(installed) -> None:
    cluster = installed
    cluster.apply({"apiVersion": "gpustack.ai/v1", "kind": "Setting",
                   "metadata": {"name": "model-artifact-delivery-mode", "namespace": SYSTEM},
                   "spec": {"value": "Node"}})  # fmt: skip
    cluster.apply({
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
        "metadata": {"name": "chat-node", "namespace": NS},
        "spec": {
            "model": {"name": MODEL, "artifactRef": {"name": "qwen"}},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [{"name": "server", "instanceType": POOL, "resources": {"accelerator": 1}}],
        },
    })  # fmt: skip
    server, base = serve_ready(cluster, "chat-node")
    volumes = {v["name"]: v for v in server["spec"]["volumes"]}
    assert volumes["gpustack-model"]["csi"]["driver"] == constants.CSI_DRIVER_MODEL
    about = reach.http(f"{base}/standin")
    # The engine was started on the mount's path and read the weights the kubelet mounted there
    # through the model-manager container's NodePublishVolume.
    assert (
        about["model"] == constants.MODEL_MOUNT_PATH
        and about["weights"]["path"] == constants.MODEL_MOUNT_PATH
    )
    assert about["weights"]["files"] >= 1 and about["weights"]["bytes"] > 0
    store = cluster.kubectl_json("get", "nodemodelstore", NODE)
    assert any(m.get("state") == d.STATE_READY for m in (store.get("status") or {}).get("models") or []), (
        store.get("status")
    )


def artifact() -> dict:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelArtifact",
            "metadata": {"name": "qwen", "namespace": NS},
            "spec": {"source": {"huggingFace": {"repository": MODEL, "revision": "main"}}}}  # fmt: skip


def engine_metric(text: str, name: str) -> int:
    """``vllm:<name>`` of the stand-in engine's /metrics (one served model)."""
    (line,) = [line for line in text.splitlines() if line.startswith(f"vllm:{name}{{")]
    return int(float(line.rsplit(" ", 1)[1]))


def answered(url: str, body: dict) -> dict | None:
    """The answer once the router has found its replicas (503 until then)."""
    try:
        return reach.http(url, body)
    except urllib.error.HTTPError as error:
        if error.code == 503:
            return None
        raise


def test_a_prefill_decode_deployment_answers_through_its_vllm_router(installed) -> None:
    cluster = installed
    ensure_namespace(cluster, NS)
    # The earlier steps' deployments hold two of the node's six whole cards: the pair needs two.
    for name in ("chat", "chat-node"):
        cluster.kubectl("delete", "modeldeployment", name, "-n", NS, "--ignore-not-found", "--wait=true",
                        timeout=WAIT)  # fmt: skip
    cluster.apply(artifact())
    roles = [{"name": kind.lower(), "kind": kind, "instanceType": POOL, "resources": {"accelerator": 1}}
             for kind in ("Prefill", "Decode")]  # fmt: skip
    cluster.apply({
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
        "metadata": {"name": "chat-pd", "namespace": NS},
        "spec": {"model": {"name": MODEL, "artifactRef": {"name": "qwen"}},
                 "engine": {"name": "vLLM", "version": "0.29.0"},
                 "router": {"name": "vllm-router"}, "roles": roles},
    })  # fmt: skip

    def deployment_ready() -> dict | None:
        found = cluster.kubectl_json("get", "modeldeployment", "chat-pd", "-n", NS)
        return found if (found.get("status") or {}).get("phase") == "Ready" else None

    try:
        found = harness.wait_for(deployment_ready, timeout=WAIT, what="chat-pd Ready")
    except TimeoutError:
        listed = cluster.kubectl("get", "pods,modeldeployment,deployments", "-n", NS, "-o", "wide").stdout
        logs = cluster.kubectl("logs", "-n", NS, "deployment/chat-pd-router", "--tail=40", check=False).stdout
        events = cluster.kubectl("get", "events", "-n", NS, "--sort-by=.lastTimestamp", check=False).stdout
        raise AssertionError(f"chat-pd not Ready:\n{listed}\n{logs}\n{events[-4000:]}") from None
    status = found["status"]
    router_ready = next(c for c in status["conditions"] if c["type"] == "RouterReady")
    assert (router_ready["status"], router_ready["reason"]) == ("True", "Ready"), router_ready
    assert status["router"]["name"] == "vllm-router"
    assert status["router"]["endpoint"] == status["endpoint"] == f"http://chat-pd-router.{NS}.svc:8000"

    # The router's Pod: the stand-in router image, in a container, with the rendered command line.
    (router_pod,) = [p for p in cluster.kubectl_json("get", "pods", "-n", NS, "-l",
                                                     f"{constants.LABEL_APP_INSTANCE}=chat-pd,"
                                                     "app.kubernetes.io/component=router")["items"]
                     if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    container = router_pod["spec"]["containers"][0]
    assert container["image"] == ROUTER_IMAGE and container["command"] == ["vllm-router"]
    assert "--vllm-pd-disaggregation" in container["args"]
    assert router_pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")

    # The replicas, by kind, and their engines' addresses (the host routes to the Pod network).
    engines = {}
    for kind in ("prefill", "decode"):
        (pod,) = [p for p in cluster.kubectl_json("get", "pods", "-n", NS, "-l",
                                                  f"{constants.LABEL_APP_INSTANCE}=chat-pd,"
                                                  f"{constants.LABEL_ROLE_KIND}={kind}")["items"]
                  if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
        engines[kind] = (
            f"http://{pod['status']['podIP']}:{main['command'][main['command'].index('--port') + 1]}"
        )
        assert reach.http(f"{engines[kind]}/standin")["role"] == kind

    # A chat request at the router Service's endpoint (its EndpointSlice, as kube-proxy reads it).
    base = f"http://{reach.service_endpoint(cluster, NS, 'chat-pd-router', 'http')}"
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello through the router"}],
        "max_tokens": 4,
    }
    answer = harness.wait_for(lambda: answered(f"{base}/v1/chat/completions", body), timeout=60, interval=1,
                              what="the router answering a chat request")  # fmt: skip
    direct = reach.http(f"{engines['decode']}/v1/chat/completions", body)
    assert answer["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]
    assert len(answer["choices"][0]["message"]["content"].split()) == 4
    assert [m["id"] for m in reach.http(f"{base}/v1/models")["data"]] == [MODEL]

    # Each replica was asked once through the router: the prefill for one token, the decode for four
    # (and once more directly above).
    prefill = urllib.request.urlopen(f"{engines['prefill']}/metrics", timeout=10).read().decode()
    decode = urllib.request.urlopen(f"{engines['decode']}/metrics", timeout=10).read().decode()
    assert (
        engine_metric(prefill, "request_success_total"),
        engine_metric(prefill, "generation_tokens_total"),
    ) == (1, 1)
    assert (
        engine_metric(decode, "request_success_total"),
        engine_metric(decode, "generation_tokens_total"),
    ) == (2, 8)
    # The router found them through the Kubernetes API and says where it sent the request.
    log = cluster.kubectl("logs", "-n", NS, router_pod["metadata"]["name"]).stdout
    assert "discovered prefill workers through the Kubernetes API" in log, log[-2000:]
    assert "discovered decode workers through the Kubernetes API" in log, log[-2000:]
    assert (
        f"-> prefill worker {engines['prefill']}: 200" in log
        and f"-> decode worker {engines['decode']}: 200" in log
    )
    metrics = urllib.request.urlopen(
        f"http://{router_pod['status']['podIP']}:29000/metrics", timeout=10
    ).read()
    assert f'worker="{engines["prefill"]}",worker_type="prefill"}} 1' in metrics.decode(), metrics


STORE = "ct-mooncake"


def store_backend() -> dict:
    """A managed store of one 256 MiB DRAM member on the container node, with the default election
    (``electionBackend: Kubernetes``: the store image's stand-in for the master's Lease backend,
    standin/lease_master.py, campaigns)."""
    return {
        "apiVersion": "worker.gpustack.ai/v1", "kind": "KVCacheBackend",
        "metadata": {"name": STORE},
        "spec": {"type": "Mooncake", "connection": {"managed": {
            "leader": {},
            "members": [{"nodeSelector": {"kubernetes.io/hostname": NODE}, "medium": "DRAM",
                         "capacityPerMember": "256Mi", "localBufferSize": "32Mi"}],
        }}},
    }  # fmt: skip


def phase_ready(cluster: harness.ClusterInfo, *args: str) -> dict | None:
    found = cluster.kubectl_json("get", *args)
    return found if (found.get("status") or {}).get("phase") == "Ready" else None


def wait_ready(cluster: harness.ClusterInfo, *args: str) -> dict:
    try:
        return harness.wait_for(
            lambda: phase_ready(cluster, *args), timeout=WAIT, what=f"{' '.join(args)} Ready"
        )
    except TimeoutError:
        found = cluster.kubectl("get", *args, "-o", "yaml", check=False).stdout
        pods = cluster.kubectl("get", "pods", "-n", SYSTEM, "-o", "wide", check=False).stdout
        logs = cluster.kubectl("logs", "-n", SYSTEM, "-l", f"{kv.LABEL_BACKEND}={STORE}", "--tail=30",
                               "--all-containers", check=False).stdout  # fmt: skip
        raise AssertionError(
            f"{' '.join(args)} not Ready:\n{found[-3000:]}\n{pods}\n{logs[-4000:]}"
        ) from None


def resolve(server: str, name: str) -> list[str]:
    """A records of ``name`` from the DNS server at ``server`` (one UDP query, as a Pod's resolver asks)."""
    query = struct.pack("!HHHHHH", 0x4B1D, 0x0100, 1, 0, 0, 0)
    query += (
        b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
    )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(query, (server, 53))
        reply = sock.recv(4096)
    count, at = struct.unpack("!H", reply[6:8])[0], len(query)
    found = []
    for _ in range(count):
        at += 2  # the name, compressed to the question's
        kind, _cls, _ttl, size = struct.unpack("!HHIH", reply[at : at + 10])
        if kind == 1:
            found.append(socket.inet_ntoa(reply[at + 10 : at + 10 + size]))
        at += 10 + size
    return found


def test_a_managed_mooncake_store_runs_in_containers_and_an_engine_gets_its_client(installed) -> None:
    cluster = installed
    ensure_namespace(cluster, NS)
    cluster.apply(store_backend())
    backend = wait_ready(cluster, "kvcb", STORE)
    # The leader and the member: containers of the store image, with the rendered command lines.
    # The backend's Ready reads the leader's own service_ready; the kubelet marks the Pods Ready at
    # their next readiness probe, which may come a period later.
    selector = f"{kv.LABEL_BACKEND}={STORE}"
    cluster.kubectl("wait", "--for=condition=Ready", "pod", "-l", selector, "-n", SYSTEM, "--timeout=180s")
    pods = [p for p in cluster.kubectl_json("get", "pods", "-n", SYSTEM, "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    by_role = {p["metadata"]["labels"][kv.LABEL_ROLE]: p for p in pods}
    assert set(by_role) == {kv.ROLE_LEADER, kv.ROLE_MEMBER}, sorted(by_role)
    for role, found in by_role.items():
        container = found["spec"]["containers"][0]
        assert container["image"] == STORE_IMAGE, (role, container["image"])
        status = found["status"]["containerStatuses"][0]
        assert status["containerID"].startswith("containerd://") and status["ready"], (role, status)
        assert found["spec"]["nodeName"] == NODE
    leader, member = by_role[kv.ROLE_LEADER], by_role[kv.ROLE_MEMBER]
    assert leader["spec"]["containers"][0]["command"] == ["mooncake_master"]
    assert member["spec"]["containers"][0]["command"] == ["mc_store_rest_server"]
    # What runs inside is the wheel's programs (tini is PID 1 and forwards SIGTERM), the master
    # started by the Lease backend's stand-in once it won the election, without the flags it lacks.
    inside = exec_in(cluster, leader["metadata"]["name"], SYSTEM, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "/opt/mooncake/lib/mooncake/mooncake_master -rpc_port=50051" in inside, inside[-2000:]
    assert "standin.lease_master" in inside and "-ha_backend_type=k8s" in inside, inside[-2000:]
    # The election: the Lease <backend>-leader held by the leader's Pod IP and RPC port, renewed,
    # and the backend reporting it (ElectionObserved names the Pod).
    lease = cluster.kubectl_json("get", "lease", kv.leader_name(STORE), "-n", SYSTEM)
    assert lease["spec"]["holderIdentity"] == f"{leader['status']['podIP']}:{kv.CLIENT_PORT}", lease["spec"]

    def election_observed() -> dict | None:
        found = cluster.kubectl_json("get", "kvcb", STORE)
        rows = [
            c for c in (found.get("status") or {}).get("conditions") or [] if c["type"] == "ElectionObserved"
        ]
        return rows[0] if rows and rows[0]["status"] == "True" else None

    observed = harness.wait_for(election_observed, timeout=WAIT, what="ElectionObserved=True")
    assert leader["metadata"]["name"] in observed["message"], observed

    # The member's segment is mounted in the master, at the member Pod's address; capacity observed.
    # A row names its node once the member Pod is Ready (the kubelet's probe), so it is read again.
    def members_on_node() -> dict | None:
        found = cluster.kubectl_json("get", "kvcb", STORE)
        rows = (found.get("status") or {}).get("members") or []
        return found if [r.get("nodeName") for r in rows] == [NODE] else None

    try:
        backend = harness.wait_for(members_on_node, timeout=WAIT, what="the member row on its node")
    except TimeoutError:
        raise AssertionError(cluster.kubectl_json("get", "kvcb", STORE).get("status")) from None
    assert (backend["status"].get("capacity") or {}).get("total"), backend["status"]
    leader_ip = leader["status"]["podIP"]
    health = reach.http(f"http://{leader_ip}:{kv.ADMIN_PORT}/health")
    assert health["service_ready"] is True, health
    segments = reach.http(f"http://{leader_ip}:{kv.ADMIN_PORT}/get_segments_detail")["segments"]
    assert any(member["status"]["podIP"] in json.dumps(s) for s in segments), segments

    # A pool over it and a Binding in the tenant namespace: Ready against the master's ledger.
    cluster.apply({"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePool", "metadata": {"name": STORE},
                   "spec": {"backends": [STORE], "quota": {"total": "200Mi"}}})  # fmt: skip
    cluster.apply({"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePoolBinding",
                   "metadata": {"name": "chat-cache", "namespace": NS},
                   "spec": {"poolRef": {"name": STORE}, "quota": {"ceiling": "100Mi"},
                            "domain": {"name": "chat-kv", "blockSize": 16, "dtype": "bfloat16"}}})  # fmt: skip
    pool = wait_ready(cluster, "kvcp", STORE)
    client = f"{kv.leader_name(STORE)}.{SYSTEM}.svc:{kv.CLIENT_PORT}"
    assert pool["status"]["clientEndpoint"] == client
    binding = wait_ready(cluster, "kvcpb", "chat-cache", "-n", NS)
    assert binding["status"].get("effectiveQuota"), binding["status"]
    ledger = reach.http(f"http://{leader_ip}:{kv.ADMIN_PORT}/api/v1/tenant_quotas")["data"]
    assert "chat-kv" in [row["tenant_id"] for row in ledger], ledger

    # An engine on the pool: the deployment's Pod carries the client configuration.
    cluster.apply({"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelArtifact",
                   "metadata": {"name": "qwen", "namespace": NS},
                   "spec": {"source": {"huggingFace": {"repository": MODEL, "revision": "main"}}}})  # fmt: skip
    cluster.apply({
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
        "metadata": {"name": "chat-kv", "namespace": NS},
        "spec": {
            "model": {"name": MODEL, "artifactRef": {"name": "qwen"}},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "kvCache": {"poolRef": {"name": "chat-cache"}},
            "roles": [{"name": "server", "instanceType": POOL, "resources": {"accelerator": 1}}],
        },
    })  # fmt: skip
    server, base = serve_ready(cluster, "chat-kv")
    config = json.loads(server["metadata"]["annotations"][constants.ANNOTATION_KVCACHE_CLIENT_CONFIG])
    assert config["master_server_address"] == client and config["tenant_id"] == "chat-kv", config
    main = next(c for c in server["spec"]["containers"] if c["name"] == "main")
    argv = main["command"] + main.get("args", [])
    assert "MooncakeStoreConnector" in argv[argv.index("--kv-transfer-config") + 1], argv
    # Inside the engine's container: the file the downward API projects, and the master's name
    # resolving (the node's cluster DNS) to the leader Pod.
    inside = exec_in(cluster, server["metadata"]["name"], NS,
                     "cat $MOONCAKE_CONFIG_PATH; echo; getent hosts " + client.rsplit(":", 1)[0], container="main")  # fmt: skip
    first, resolved = inside.strip().splitlines()[0], inside.strip().splitlines()[-1]
    assert json.loads(first) == config
    assert resolved.split()[0] == leader_ip, inside
    # From the host: the same name through the node's DNS, and the master answering at that address.
    dns = container_node.addresses(container_node.network_id(nodes.node(cluster, NODE).kubelet_port))["host"]
    assert resolve(dns, client.rsplit(":", 1)[0] + ".cluster.local") == [leader_ip]
    with socket.create_connection((leader_ip, kv.CLIENT_PORT), timeout=5):
        pass
    assert reach.http(f"http://{leader_ip}:{kv.ADMIN_PORT}/health")["service_ready"] is True
    assert reach.http(f"{base}/v1/models")["data"][0]["id"] == MODEL


def test_helm_uninstall_removes_the_release_pods_and_kueue(installed) -> None:
    """`helm uninstall --wait` completes: its pre-delete hook emptied Kueue of the operator's pools
    while Kueue ran, so Kueue's CRDs go with the release instead of hanging Terminating."""
    cluster = installed
    assert harness.delete_namespace(cluster, NS, timeout=120), f"namespace {NS} still there after 120 s"
    # The store's Pods run in the operator's namespace, owned by the cluster-scoped backend: a user
    # deletes the backend and its pools (their finalizers need the worker) before uninstalling.
    cluster.kubectl("delete", "kvcachepools,kvcachebackends", "--all", "--wait=true", timeout=180)
    chart.uninstall(cluster)
    harness.wait_for(lambda: not release_pods(cluster), timeout=WAIT, what="the release's Pods gone")
    left = [
        c["metadata"]["name"]
        for c in cluster.kubectl_json("get", "crd")["items"]
        if "kueue" in c["metadata"]["name"]
    ]
    assert left == [], left
    directory = nodes.node_directory(cluster, NODE) / "run" / "runc" / "k8s.io"
    harness.wait_for(
        lambda: not directory.exists() or len(list(directory.iterdir())) == 0,
        timeout=WAIT,
        what="no container left on the node",
    )
