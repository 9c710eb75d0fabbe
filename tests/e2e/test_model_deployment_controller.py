"""The ModelDeployment controller on the local control plane with the real Kueue (issue 14, item 5).

Simulated nodes (kwok: two with 8 × H100, one with 4 × A10G, each with the publish-only device
manager that writes its ``Devices`` and NodeFeature, labelled by nfd-master) run the Pods; the whole worker (webhooks and every
controller) runs as a process, as it does in a cluster.  Everything is driven with kubectl:

- the seeds' prefill/decode and topology deployments, retargeted to the derived pools as the seeds
  instruct, reach ``Ready`` with an endpoint, and their Pods, Services and Workloads read as §7 says;
- a size-2 role forms its groups and the joint check holds one group until the other reserves;
- an ``extraArgs`` edit rolls one replica at a time, ``ReplicasUpToDate`` going through
  ``RolloutInProgress`` to ``UpToDate``; ``replicas: 3 → 1`` removes ordinals 2 and 1 with their
  Workloads; a deleted Pod is replaced under a new name;
- a role whose image cannot be derived gets ``RenderFailed`` while the others keep converging;
- a restarted worker changes nothing that was converged; deleting a deployment removes its Pods,
  Workloads and Services, then the finalizer.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import gpustack
import harness
import nodes
import pytest
import yaml

from api import constants
from api.naming import topology_profile
from controllers.modeldeployment import names
from tests.e2e.objects import delete_all, node_profiles, queue_flavors

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SUFFIX = uuid.uuid4().hex[:5]
NS = f"md-ctl-{SUFFIX}"
H100_POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
CPU_POOL = "gpustack--generic-linux-amd64"
NODES = {
    f"md-h100-a-{SUFFIX}": "h100-8.yaml",
    f"md-h100-b-{SUFFIX}": "h100-8.yaml",
    f"md-a10g-{SUFFIX}": "a10g-4.yaml",
}
# This module's device-manager ports (tests/cluster/nodes.py).
SLOTS = {name: 13 + i for i, name in enumerate(NODES)}
GROUP = "kueue.x-k8s.io/pod-group-name"
WAIT = 240
# The cloud provider's zone on every node, and the source that turns it into a zone → hostname
# profile: the topology seed requires the zone level of its pool's flavors.
ZONE = {"topology.kubernetes.io/zone": f"md-zone-{SUFFIX}"}
ZONES = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "TopologySource",
    "metadata": {"name": f"md-zones-{SUFFIX}"},
    "spec": {"nodeSelector": {"matchLabels": ZONE}, "levels": list(ZONE), "nodeLabels": {}},
}
ZONED = topology_profile([*ZONE, constants.LABEL_HOSTNAME])  # the profile the source gives the nodes


@pytest.fixture(scope="module")
def md_env(cluster: harness.ClusterInfo):
    op = gpustack.install(cluster)
    gpustack.ensure_namespace(cluster, NS)
    harness.wait_for_default_service_account(cluster, NS)
    started: list[nodes.Node] = []
    try:
        for name, profile in NODES.items():
            # A kwok node whose publish-only device manager writes its Devices and NodeFeature
            # (nfd-master labels the node from it); the worker publishes the topology profile.
            started.append(nodes.start_node(cluster, name, profile, slot=SLOTS[name], real=False))
            # What the cloud provider puts on the node.
            cluster.kubectl("label", "node", name, *(f"{k}={v}" for k, v in ZONE.items()), "--overwrite")
        gpustack.start_worker(cluster, op, "--no-leader-election")
        apply(cluster, ZONES)  # once the worker serves its admission
        _wait_pools_ready(cluster)
        yield cluster, op
    finally:
        delete_all(cluster, "modeldeployments", NS, WAIT, "deployments gone")
        cluster.kubectl(
            "delete", "topologysource", ZONES["metadata"]["name"], "--ignore-not-found", check=False
        )
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        nodes.remove_nodes(cluster, started)


def _wait_pools_ready(cluster: harness.ClusterInfo) -> None:
    def pools_ready() -> bool:
        # The zones change every node's topology profile live (the nodes may get the hostname-only
        # profile first, before the source is Ready): wait for the zone profile on every node, for
        # the accelerated queues to have swapped to its flavors (a deployment admitted into a
        # hostname-only flavor on its way out would pin a profile no node has any more), and for the
        # pools to count their cards again under them.
        if any(profile != ZONED for profile in node_profiles(cluster, NODES).values()):
            return False
        for pool in (H100_POOL, A10G_POOL):
            flavors = queue_flavors(cluster, pool)
            if not flavors or any(not name.endswith(f"-{ZONED}") for name in flavors):
                return False
        types = {t["metadata"]["name"]: t for t in cluster.kubectl_json("get", "instancetypes")["items"]}
        for pool in (H100_POOL, A10G_POOL, CPU_POOL):
            status = (types.get(pool) or {}).get("status") or {}
            if not status.get("entrance"):
                return False
            if pool != CPU_POOL and not (status.get("detail") or {}).get("runtimeVersion"):
                return False
            if pool != CPU_POOL and not int((status.get("accelerator") or {}).get("capacity") or 0):
                return False
        lqs = cluster.kubectl_json("get", "localqueues.kueue.x-k8s.io", "-n", NS)["items"]
        return len(lqs) >= 3

    try:
        harness.wait_for(pools_ready, timeout=WAIT, what="derived pools with entrances and LocalQueues")
    except TimeoutError as error:
        profiles = node_profiles(cluster, NODES)
        queues = {pool: queue_flavors(cluster, pool) for pool in (H100_POOL, A10G_POOL)}
        raise TimeoutError(
            f"{error}: want profile {ZONED}; profiles {profiles}; queue flavors {queues}"
        ) from None


# --- helpers -------------------------------------------------------------------------------------


def md_get(cluster, name) -> dict:
    return cluster.kubectl_json("get", "modeldeployment", name, "-n", NS)


def condition(obj, kind) -> dict:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond["type"] == kind:
            return cond
    return {}


def pods_of(cluster, name, *selectors) -> list[dict]:
    selector = ",".join([f"{constants.LABEL_APP_INSTANCE}={name}", *selectors])
    return cluster.kubectl_json("get", "pods", "-n", NS, "-l", selector)["items"]


def workloads(cluster) -> dict[str, dict]:
    return {
        w["metadata"]["name"]: w
        for w in cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", NS)["items"]
    }


def wait_ready(cluster, name, timeout=WAIT) -> dict:
    def ready():
        obj = md_get(cluster, name)
        return obj if (obj.get("status") or {}).get("phase") == "Ready" else None

    try:
        return harness.wait_for(ready, timeout=timeout, what=f"{name} Ready")
    except TimeoutError as error:
        obj = md_get(cluster, name)
        raise TimeoutError(f"{error}: status {json.dumps(obj.get('status'))[:3000]}") from None


def apply(cluster, obj) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert result.returncode == 0, result.stderr


def deployment(name, *roles, **spec) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": list(roles),
            **spec,
        },
    }


def role(name="server", **fields) -> dict:
    return {"name": name, "replicas": 1, "instanceType": A10G_POOL, "resources": {"accelerator": 1}, **fields}


def delete_and_wait_gone(cluster, name) -> None:
    cluster.kubectl("delete", "modeldeployment", name, "-n", NS, "--wait=false")
    harness.wait_for(
        lambda: cluster.kubectl("get", "modeldeployment", name, "-n", NS, check=False).returncode != 0,
        timeout=WAIT,
        what=f"{name} gone",
    )


def seed(path: str) -> dict:
    obj = yaml.safe_load((REPO / "examples" / path).read_text())
    obj["metadata"]["namespace"] = NS
    for r in obj["spec"]["roles"]:
        r["instanceType"] = H100_POOL  # "replace instanceType with names from kubectl get instancetypes"
    return obj


# --- tests ---------------------------------------------------------------------------------------


def test_seed_deployments_reach_ready_with_an_endpoint(md_env) -> None:
    cluster, _ = md_env
    pd, topo = (
        seed("51-modeldeployment-prefill-decode.yaml"),
        seed("52-modeldeployment-qwen3-8b-topology.yaml"),
    )
    # Both at once: together they need all 16 cards of the two H100 nodes (prefill and decode 2 × 2
    # cards, the topology seed 2 groups of 4 one-card members), so their replicas spread over the
    # pool's nodes and the size-4 groups land where each member fits (docs/scheduling.md).
    apply(cluster, pd)
    apply(cluster, topo)
    ready = wait_ready(cluster, "qwen-prefill-decode")
    wait_ready(cluster, "qwen3-8b")
    cards: dict[str, int] = {}
    for p in pods_of(cluster, "qwen-prefill-decode") + pods_of(cluster, "qwen3-8b"):
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        cards[p["spec"]["nodeName"]] = cards.get(p["spec"]["nodeName"], 0) + int(limits["nvidia.com/gpu"])
    assert cards == {name: 8 for name in NODES if name.startswith("md-h100-")}
    status = ready["status"]
    assert status["endpoint"] == f"http://qwen-prefill-decode.{NS}.svc:8000"
    assert {r["name"]: (r["desired"], r["ready"], r["quotaReserved"]) for r in status["roles"]} == {
        "prefill": (2, 2, 2),
        "decode": (2, 2, 2),
    }
    assert status["roleSummary"] == "2P2D"
    assert condition(ready, "QuotaReserved")["status"] == "True"
    assert condition(ready, "ReplicasUpToDate")["reason"] == "UpToDate"
    assert condition(ready, "KVEventsPublishing")["reason"] == "NoRouter"
    assert ready["metadata"]["finalizers"] == [constants.FINALIZER_MODEL_DEPLOYMENT]
    pods = pods_of(cluster, "qwen-prefill-decode")
    assert len(pods) == 4
    entrance = cluster.kubectl_json("get", "instancetype", H100_POOL)["status"]["entrance"]
    for pod in pods:
        labels, ann = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert pod["metadata"]["generateName"] in (
            "qwen-prefill-decode-prefill-",
            "qwen-prefill-decode-decode-",
        )
        assert labels[constants.KUEUE_QUEUE_NAME] == entrance
        assert labels[constants.LABEL_ROLE_KIND] in ("prefill", "decode")
        assert re.fullmatch(r"gpustack-fnv64-[0-9a-f]{16}", labels[GROUP])
        assert (
            ann[constants.KUEUE_POD_GROUP_TOTAL_COUNT] == "1"
            and ann[constants.KUEUE_POD_GROUP_SERVING] == "true"
        )
        assert constants.KUEUE_POD_GROUP_FAST_ADMISSION not in ann
        assert re.fullmatch(r"[0-9a-f]{64}", ann[constants.ANNOTATION_POD_SPEC_HASH])
        main = pod["spec"]["containers"][0]
        assert main["image"] == "gpustack/runner:cuda12.8-vllm0.29.0"
        assert main["command"][:3] == ["vllm", "serve", "Qwen/Qwen2.5-72B-Instruct"]
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert pod["spec"]["nodeName"].startswith("md-h100-")
    wls = workloads(cluster)
    for pod in pods:
        wl = wls[pod["metadata"]["labels"][GROUP]]  # Kueue names a group's Workload after the group
        assert any(
            cond["type"] == "Admitted" and cond["status"] == "True" for cond in wl["status"]["conditions"]
        )
        checks = {ch["name"]: ch["state"] for ch in wl["status"]["admissionChecks"]}
        assert checks[constants.ADMISSION_CHECK_JOINT] == "Ready"
    svcs = {s["metadata"]["name"]: s for s in cluster.kubectl_json("get", "services", "-n", NS)["items"]}
    assert svcs["qwen-prefill-decode"]["spec"]["selector"][constants.LABEL_APP_COMPONENT] == "prefill"
    assert {"qwen-prefill-decode-prefill", "qwen-prefill-decode-decode"} <= set(svcs)

    # Deletion: Pods, Workloads and Services go, then the finalizer.
    groups = {p["metadata"]["labels"][GROUP] for p in pods}
    delete_and_wait_gone(cluster, "qwen-prefill-decode")
    assert not pods_of(cluster, "qwen-prefill-decode")
    assert not groups & set(workloads(cluster))
    left = [s["metadata"]["name"] for s in cluster.kubectl_json("get", "services", "-n", NS)["items"]]
    assert not [s for s in left if s.startswith("qwen-prefill-decode")]

    topo_ready = wait_ready(cluster, "qwen3-8b")
    assert topo_ready["status"]["endpoint"] == f"http://qwen3-8b.{NS}.svc:8000"
    members = pods_of(cluster, "qwen3-8b")
    assert sorted(p["metadata"]["name"] for p in members) == [
        f"qwen3-8b-server-r{k}-m{m}" for k in range(2) for m in range(4)
    ]
    leader = next(p for p in members if p["metadata"]["name"] == "qwen3-8b-server-r1-m0")
    assert (
        leader["spec"]["hostname"] == "qwen3-8b-server-r1-m0"
        and leader["spec"]["subdomain"] == "qwen3-8b-server-r1"
    )
    env = {e["name"]: e for e in leader["spec"]["containers"][0]["env"]}
    assert env[constants.ENV_REPLICA_LEADER_ADDRESS]["value"] == "qwen3-8b-server-r1-m0.qwen3-8b-server-r1"
    assert env[constants.ENV_REPLICA_SIZE]["value"] == "4"
    headless = cluster.kubectl_json("get", "service", "qwen3-8b-server-r1", "-n", NS)
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    columns = cluster.kubectl("get", "md", "qwen3-8b", "-n", NS).stdout.split("\n")[1].split()
    assert columns[:5] == ["qwen3-8b", "vLLM", "2S", "Ready", f"http://qwen3-8b.{NS}.svc:8000"]

    delete_and_wait_gone(cluster, "qwen3-8b")


def test_joint_check_holds_a_group_until_the_other_reserves(md_env, request) -> None:
    cluster, _ = md_env
    # A failure part way must not leave the deployment holding cards the next tests need.
    request.addfinalizer(
        lambda: cluster.kubectl(
            "delete", "md", "joint", "-n", NS, "--ignore-not-found", "--wait=false", check=False
        )
    )
    entrance = cluster.kubectl_json("get", "instancetype", A10G_POOL)["status"]["entrance"]
    blocker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "blocker", "namespace": NS, "labels": {constants.KUEUE_QUEUE_NAME: entrance}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"limits": {"nvidia.com/gpu": "3"}},
                }
            ]
        },
    }
    apply(cluster, blocker)
    try:
        harness.wait_for(
            lambda: any(
                p["metadata"]["name"] == "blocker" and p["spec"].get("nodeName")
                for p in cluster.kubectl_json("get", "pods", "-n", NS)["items"]
            ),
            timeout=WAIT,
            what="blocker running",
        )
        # Two groups: a (2 members, one card each) and b (one card).  One card is free: b reserves it
        # and the joint check holds b until a reserves too.
        apply(cluster, deployment("joint", role("a", size=2), role("b")))
        group_a = names.pod_group_name(NS, "joint", "a", 0)
        group_b = names.pod_group_name(NS, "joint", "b", 0)

        def held():
            wls = workloads(cluster)
            a, b = wls.get(group_a), wls.get(group_b)
            if a is None or b is None:
                return None
            reserved = {
                cond["type"]: cond["status"] for cond in (b.get("status") or {}).get("conditions") or ()
            }
            checks = {ch["name"]: ch for ch in (b.get("status") or {}).get("admissionChecks") or ()}
            entry = checks.get(constants.ADMISSION_CHECK_JOINT) or {}
            # Kueue lists the check Pending with no message the moment b reserves; the joint check's
            # own answer (which groups it waits for) comes a reconcile later.
            pending = entry.get("state") == "Pending" and entry.get("message")
            return b if reserved.get("QuotaReserved") == "True" and pending else None

        b = harness.wait_for(held, timeout=WAIT, what="group b reserved and held Pending")
        message = {ch["name"]: ch for ch in b["status"]["admissionChecks"]}[constants.ADMISSION_CHECK_JOINT][
            "message"
        ]
        assert "a/r0" in message and "b/r0" not in message
        assert all(not p["spec"].get("nodeName") for p in pods_of(cluster, "joint"))

        def reported():
            # The deployment's status follows its Workloads a reconcile later.
            obj = md_get(cluster, "joint")
            roles = {r["name"]: r.get("quotaReserved") for r in (obj.get("status") or {}).get("roles") or ()}
            return obj if roles == {"a": 0, "b": 1} else None

        obj = harness.wait_for(reported, timeout=WAIT, what="joint's status: b reserved, a not")
        assert condition(obj, "QuotaReserved")["reason"] == "Pending"
        # The blocker's own Workload is not a deployment's: the check answered Ready for it.
        blocker_wl = next(
            w
            for w in workloads(cluster).values()
            if any(o["name"] == "blocker" for o in w["metadata"].get("ownerReferences") or ())
        )
        states = {ch["name"]: ch["state"] for ch in blocker_wl["status"]["admissionChecks"]}
        assert states[constants.ADMISSION_CHECK_JOINT] == "Ready"
    finally:
        # Held cards would starve every later test of the module.
        cluster.kubectl("delete", "pod", "blocker", "-n", NS, "--ignore-not-found", check=False)
    ready = wait_ready(cluster, "joint")
    assert {r["name"]: r["ready"] for r in ready["status"]["roles"]} == {"a": 1, "b": 1}
    assert sorted(
        p["metadata"]["name"] for p in pods_of(cluster, "joint", f"{constants.LABEL_APP_COMPONENT}=a")
    ) == [
        "joint-a-r0-m0",
        "joint-a-r0-m1",
    ]
    delete_and_wait_gone(cluster, "joint")


def test_rollout_scale_down_and_pod_replacement(md_env) -> None:
    cluster, _ = md_env
    apply(cluster, deployment("roll", role(replicas=3, extraArgs=["--max-model-len", "8192"])))
    wait_ready(cluster, "roll")
    before = {p["metadata"]["uid"] for p in pods_of(cluster, "roll")}
    edited = deployment("roll", role(replicas=3, extraArgs=["--max-model-len", "4096"]))
    apply(cluster, edited)
    seen_reasons: list[str] = []
    most_gone = 0

    def rolled():
        nonlocal most_gone
        obj = md_get(cluster, "roll")
        reason = condition(obj, "ReplicasUpToDate").get("reason", "")
        if not seen_reasons or seen_reasons[-1] != reason:
            seen_reasons.append(reason)
        pods = pods_of(cluster, "roll")
        serving = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        most_gone = max(most_gone, 3 - len(serving))
        fresh = [p for p in serving if "4096" in p["spec"]["containers"][0]["command"]]
        return len(fresh) == 3 and reason == "UpToDate" and obj["status"]["phase"] == "Ready"

    harness.wait_for(rolled, timeout=WAIT * 2, interval=0.3, what="rollout done")
    assert "RolloutInProgress" in seen_reasons, seen_reasons
    assert seen_reasons[-1] == "UpToDate"
    assert most_gone <= 1  # one replica per role per pass
    assert not before & {p["metadata"]["uid"] for p in pods_of(cluster, "roll")}

    # Scale down 3 -> 1: ordinals 2 and 1 leave with their Workloads; ordinal 0 is not touched.
    keep = next(
        p for p in pods_of(cluster, "roll") if p["metadata"]["labels"][constants.LABEL_POD_ORDINAL] == "0"
    )
    shed = {names.pod_group_name(NS, "roll", "server", k) for k in (1, 2)}
    apply(cluster, deployment("roll", role(replicas=1, extraArgs=["--max-model-len", "4096"])))
    harness.wait_for(
        lambda: len(pods_of(cluster, "roll")) == 1 and not shed & set(workloads(cluster)),
        timeout=WAIT,
        what="scaled down to ordinal 0",
    )
    assert pods_of(cluster, "roll")[0]["metadata"]["uid"] == keep["metadata"]["uid"]

    # A deleted Pod is replaced under a new name, in the same ordinal.
    cluster.kubectl("delete", "pod", keep["metadata"]["name"], "-n", NS, "--wait=false")

    def replaced():
        pods = [p for p in pods_of(cluster, "roll") if not p["metadata"].get("deletionTimestamp")]
        return pods and pods[0]["metadata"]["name"] != keep["metadata"]["name"] and pods[0]

    new = harness.wait_for(replaced, timeout=WAIT, what="replacement")
    assert new["metadata"]["labels"][constants.LABEL_POD_ORDINAL] == "0"
    wait_ready(cluster, "roll")
    events = cluster.kubectl_json("get", "events", "-n", NS, "--field-selector", "involvedObject.name=roll")[
        "items"
    ]
    assert any(e["reason"] == "ReplicaLeaving" and keep["metadata"]["name"] in e["message"] for e in events)


def test_an_underivable_image_is_render_failed_and_others_converge(md_env) -> None:
    cluster, _ = md_env
    cpu_role = role(instanceType=CPU_POOL)
    del cpu_role["resources"]
    apply(cluster, deployment("cpu-bad", cpu_role))
    apply(cluster, deployment("fine", role()))

    def failed():
        events = cluster.kubectl_json(
            "get", "events", "-n", NS, "--field-selector", "involvedObject.name=cpu-bad"
        )["items"]
        return [e for e in events if e["reason"] == "RenderFailed" and e["type"] == "Warning"]

    events = harness.wait_for(failed, timeout=WAIT, what="RenderFailed")
    assert "generic" in events[0]["message"] and "spec.roles[].image" in events[0]["message"]
    wait_ready(cluster, "fine")
    bad = md_get(cluster, "cpu-bad")
    assert "render failed" in bad["status"]["phaseMessage"]
    assert condition(bad, "ReplicasUpToDate")["status"] == "Unknown"
    assert not pods_of(cluster, "cpu-bad")
    delete_and_wait_gone(cluster, "cpu-bad")


def test_a_router_fronts_the_deployment_and_is_pruned_when_removed(md_env) -> None:
    cluster, _ = md_env
    apply(cluster, deployment("routed", role(), router={"name": "vllm-router"}))
    ready = wait_ready(cluster, "routed")
    status = ready["status"]
    assert status["endpoint"] == f"http://routed-router.{NS}.svc:8000"
    assert status["roleSummary"] == "1R1S"
    assert condition(ready, "RouterReady")["reason"] == "Ready"
    assert status["router"]["name"] == "vllm-router"
    assert status["router"]["roles"][0]["endpoint"] == f"http://routed-server.{NS}.svc:8000"
    deploy = cluster.kubectl_json("get", "deployment", "routed-router", "-n", NS)
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--service-discovery-namespace") + 1] == NS
    for kind in ("serviceaccount", "role", "rolebinding", "service"):
        cluster.kubectl("get", kind, "routed-router", "-n", NS)
    apply(cluster, deployment("routed", role()))  # spec.router removed
    harness.wait_for(
        lambda: (
            cluster.kubectl("get", "deployment", "routed-router", "-n", NS, check=False).returncode != 0
            and cluster.kubectl("get", "service", "routed-router", "-n", NS, check=False).returncode != 0
        ),
        timeout=WAIT,
        what="router objects pruned",
    )
    obj = wait_ready(cluster, "routed")
    assert obj["status"]["endpoint"] == f"http://routed.{NS}.svc:8000"
    assert condition(obj, "RouterReady")["reason"] == "NotApplicable"
    delete_and_wait_gone(cluster, "routed")


def reconciles(op) -> float:
    return gpustack.scrape(op).get(
        'gpustack_controller_reconcile_duration_seconds_count{controller="model-deployment"}', 0.0
    )


def test_a_restarted_worker_changes_nothing_converged(md_env) -> None:
    cluster, op = md_env
    wait_ready(cluster, "fine")

    def versions():
        md = md_get(cluster, "fine")
        pods = {p["metadata"]["uid"]: p["metadata"]["resourceVersion"] for p in pods_of(cluster, "fine")}
        svcs = {
            s["metadata"]["name"]: s["metadata"]["resourceVersion"]
            for s in cluster.kubectl_json(
                "get", "services", "-n", NS, "-l", f"{constants.LABEL_APP_INSTANCE}=fine"
            )["items"]
        }
        return md["metadata"]["resourceVersion"], pods, svcs

    before = versions()
    gpustack.stop_worker(op)
    gpustack.start_worker(cluster, op, "--no-leader-election")
    harness.wait_for(lambda: reconciles(op) >= 2, timeout=WAIT, what="the restarted worker reconciled")
    assert versions() == before
    delete_and_wait_gone(cluster, "fine")


def test_a_role_no_node_can_ever_host_says_so_on_the_deployment(md_env) -> None:
    cluster, _ = md_env
    too_big = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "too-big", "namespace": NS},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-72B-Instruct"},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [
                {"name": "server", "replicas": 1, "instanceType": H100_POOL, "resources": {"accelerator": 9}}
            ],
        },
    }
    apply(cluster, too_big)
    try:

        def never_fits() -> str:
            events = cluster.kubectl_json(
                "get", "events", "-n", NS, "--field-selector", "involvedObject.name=too-big,reason=NeverFits"
            )["items"]
            return events[0]["message"] if events else ""

        message = harness.wait_for(never_fits, timeout=WAIT, what="the NeverFits event on the deployment")
        assert message.startswith('PodSet "server" asks 9 whole nvidia-h100-80gb-hbm3 cards per Pod')
        assert "the most a node offers is 8 whole cards" in message
        # The controller writes the condition after Kueue's verdict: wait for it, not for the event.
        harness.wait_for(
            lambda: (
                condition(cluster.kubectl_json("get", "md", "too-big", "-n", NS), "QuotaReserved").get(
                    "status"
                )
                == "False"
            ),
            timeout=WAIT,
            what="QuotaReserved False on the deployment",
        )
    finally:
        delete_and_wait_gone(cluster, "too-big")
