"""The KV-cache backend's refinements end to end (kv-cache spec §5.1 steps 4, 7, 9; §6.1): the worker
on the local control plane reconciling managed backends whose members run on kwok nodes.

- **Election**: an unelected leader switched to ``electionBackend: Kubernetes`` at three replicas
  rolls an elected template at one replica before it scales (read off the Deployment's own watch
  stream), renders the per-role accounts and Lease addressing, reports ``RolloutComplete`` and
  ``ElectionObserved`` without moving the phase, and prunes the accounts when switched back off.
- **Disk tier**: the member Pod's tier rendering; ``TierWasEmpty=False`` from the first survey that
  found entries, written once; ``cleanAfterDelete`` empties the tier on the node the group selects,
  skips the node where another backend's tier overlaps (an event on that Node), and the backend goes.

What stands in for parts that cannot run here, and only those: no store runs (its images cannot be
pulled here), so the election Lease is written as the electing store would write it, and two
container outcomes a kubelet reports are written as it would report them, by kwok's rules — the
survey init container's termination message and the cleanup Pod's success — each carrying what
the operator's own script printed when a real ``sh`` ran it on a real directory of this host.
Nothing here writes what an operator component writes.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import gpustack
import harness
import pytest

from controllers.kvcache import tier_render as tr

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:5]
NS = "gpustack-system"
LABEL = f"kv-refine-{SUFFIX}"
NODES = (f"kv-refine-{SUFFIX}-a", f"kv-refine-{SUFFIX}-b")


def wait(predicate, what: str, timeout: float = 120):
    return harness.wait_for(predicate, timeout=timeout, interval=1, what=what)


def get(cluster: harness.ClusterInfo, kind: str, name: str, namespace: str = "") -> dict | None:
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    proc = cluster.kubectl(*args, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def condition(obj: dict | None, kind: str) -> dict:
    return next(
        (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


def phase(obj: dict | None) -> str:
    return ((obj or {}).get("status") or {}).get("phase", "")


@pytest.fixture(scope="module")
def worker(cluster: harness.ClusterInfo) -> Iterator[gpustack.Operator]:
    for index, name in enumerate(NODES):
        harness.create_fake_node(cluster, name, labels={LABEL: "true", f"{LABEL}-zone": "ab"[index]})
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)
    try:
        yield op
    finally:
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        for name in NODES:
            harness.delete_fake_node(cluster, name)


def managed_backend(name: str, leader: dict, group: dict, **managed: object) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCacheBackend",
        "metadata": {"name": name},
        "spec": {
            "connection": {
                "managed": {
                    "leader": leader,
                    "members": [{"medium": "DRAM", "capacityPerMember": "256Mi", **group}],
                    **managed,
                }
            }
        },
    }


class DeploymentWatch:
    """Every version of one Deployment the apiserver hands a watch, in order."""

    def __init__(self, cluster: harness.ClusterInfo, name: str) -> None:
        self.seen: list[dict] = []
        self.proc = subprocess.Popen(
            [
                str(cluster.kubectl_path),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "get",
                "deployment",
                name,
                "-n",
                NS,
                "--watch",
                "-o",
                "json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=cluster.env(),
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            buffer += line
            try:
                obj, end = decoder.raw_decode(buffer.strip())
            except ValueError:
                continue
            self.seen.append(obj)
            buffer = buffer.strip()[end:]

    def stop(self) -> list[dict]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=5)
        return self.seen


def elects(deployment: dict) -> bool:
    return "-enable_ha=true" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_election_rolls_first_then_scales_and_reports(cluster, worker) -> None:
    name = f"ha-{SUFFIX}"
    group = {"nodeSelector": {LABEL: "true"}}
    cluster.apply(managed_backend(name, {"electionBackend": "None", "memberAddressing": "Lease"}, group))
    leader = f"{name}-leader"
    first = wait(lambda: get(cluster, "deployment", leader, NS), "the leader Deployment")
    assert not elects(first) and "serviceAccountName" not in first["spec"]["template"]["spec"]
    assert get(cluster, "serviceaccount", leader, NS) is None
    backend = wait(
        lambda: (
            (b := get(cluster, "kvcachebackend", name))
            and condition(b, "RolloutComplete").get("status") == "True"
            and b
        ),
        "the unelected rollout complete",
    )
    assert not condition(backend, "ElectionObserved")  # only under an election
    ds = get(cluster, "daemonset", f"{name}-members-0", NS)
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MOONCAKE_MASTER"] == f"{leader}.{NS}.svc:50051"  # Lease addressing needs an election

    watch = DeploymentWatch(cluster, leader)
    cluster.kubectl(
        "patch",
        "kvcachebackend",
        name,
        "--type=merge",
        "-p",
        json.dumps(
            {
                "spec": {
                    "connection": {"managed": {"leader": {"electionBackend": "Kubernetes", "replicas": 3}}}
                }
            }
        ),
    )
    wait(
        lambda: (d := get(cluster, "deployment", leader, NS)) and d["spec"]["replicas"] == 3 and elects(d),
        "the elected leader scaled to 3",
        timeout=180,
    )
    wait(lambda: any(v["spec"]["replicas"] == 3 for v in watch.seen), "the watch to deliver the scale")
    versions = [(v["spec"]["replicas"], elects(v)) for v in watch.stop()]
    assert (3, False) not in versions  # no update ever asked for unelected standbys
    assert versions.index((1, True)) < versions.index((3, True))  # elected at one replica first
    final = get(cluster, "deployment", leader, NS)
    assert final["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 3},
    }
    assert final["spec"]["template"]["spec"]["serviceAccountName"] == leader
    role = get(cluster, "role", leader, NS)
    assert {v for r in role["rules"] for v in r["verbs"]} == {"create", "get", "update", "patch"}
    assert get(cluster, "rolebinding", f"{name}-member", NS)["subjects"][0]["name"] == f"{name}-member"
    ds = get(cluster, "daemonset", f"{name}-members-0", NS)
    pod = ds["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert pod["serviceAccountName"] == f"{name}-member" and env["MOONCAKE_MASTER"] == f"k8s://{NS}/{leader}"

    backend = wait(
        lambda: (b := get(cluster, "kvcachebackend", name)) and condition(b, "ElectionObserved") and b,
        "ElectionObserved",
    )
    assert (
        condition(backend, "ElectionObserved")["status"],
        condition(backend, "ElectionObserved")["reason"],
    ) == ("False", "LeaseNotFound")
    provisioning = phase(backend)
    # The store's side, as an electing master writes it: its Pod IP and RPC port hold the Lease.
    pods = cluster.kubectl_json(
        "get",
        "pods",
        "-n",
        NS,
        "-l",
        f"kvcache.gpustack.ai/backend={name},kvcache.gpustack.ai/component=leader",
    )
    winner = next(
        p
        for p in pods["items"]
        if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
    )
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.apply(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": leader, "namespace": NS},
            "spec": {
                "holderIdentity": f"{winner['status']['podIP']}:50051",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )
    backend = wait(
        lambda: (
            (b := get(cluster, "kvcachebackend", name))
            and condition(b, "ElectionObserved").get("status") == "True"
            and b
        ),
        "ElectionObserved=True",
    )
    assert winner["metadata"]["name"] in condition(backend, "ElectionObserved")["message"]
    assert phase(backend) == provisioning  # neither condition moves the phase (no store answers here)

    cluster.kubectl(
        "patch",
        "kvcachebackend",
        name,
        "--type=merge",
        "-p",
        json.dumps(
            {"spec": {"connection": {"managed": {"leader": {"electionBackend": "None", "replicas": 1}}}}}
        ),
    )
    wait(
        lambda: (
            get(cluster, "serviceaccount", leader, NS) is None
            and get(cluster, "role", f"{name}-member", NS) is None
        ),
        "the accounts pruned",
    )
    wait(
        lambda: not condition(get(cluster, "kvcachebackend", name), "ElectionObserved"),
        "ElectionObserved gone",
    )
    cluster.kubectl("delete", "kvcachebackend", name, "--wait=false")
    wait(lambda: get(cluster, "kvcachebackend", name) is None, "the backend gone", timeout=240)
    assert get(cluster, "deployment", leader, NS) is None and get(cluster, "rolebinding", leader, NS) is None
    cluster.kubectl("delete", "lease", leader, "-n", NS, "--ignore-not-found")


def run_script(script_argv: list[str], *paths: Path) -> subprocess.CompletedProcess:
    sh = shutil.which("sh")
    assert sh is not None
    return subprocess.run(
        [sh, *script_argv[1:4], *map(str, paths)], capture_output=True, text=True, timeout=30
    )


def member_pod_on(cluster: harness.ClusterInfo, backend: str, node: str) -> dict:
    def found():
        pods = cluster.kubectl_json(
            "get",
            "pods",
            "-n",
            NS,
            "-l",
            f"kvcache.gpustack.ai/backend={backend},kvcache.gpustack.ai/component=member",
        )
        return next(
            (
                p
                for p in pods["items"]
                if p["spec"].get("nodeName") == node and p.get("status", {}).get("phase") == "Running"
            ),
            None,
        )

    return wait(found, f"a running member of {backend} on {node}")


def report_survey(cluster: harness.ClusterInfo, pod: dict, message: str) -> None:
    """What the node's kubelet reports once the survey init container exited with ``message``."""
    status = {
        "initContainerStatuses": [
            {
                "name": "tier-survey",
                "image": pod["spec"]["initContainers"][0]["image"],
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}},
            }
        ]
    }
    cluster.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def test_disk_tier_survey_and_clean_after_delete(cluster, worker, tmp_path: Path) -> None:
    name, other = f"tier-{SUFFIX}", f"tier-other-{SUFFIX}"
    path = f"/var/lib/kv-refine-{SUFFIX}"
    tier = {"path": path, "capacity": "1Gi", "cleanAfterDelete": True, "eviction": {"policy": "LRU"}}
    cluster.apply(
        managed_backend(
            name,
            {"electionBackend": "None"},
            {"nodeSelector": {LABEL: "true"}, "localDisks": [tier]},
            scaleIn={"gracePeriodSeconds": 5},
        )
    )
    # Another backend's tier, nested in this one's, on node b only.
    cluster.apply(
        managed_backend(
            other,
            {"electionBackend": "None"},
            {"nodeSelector": {f"{LABEL}-zone": "b"}, "localDisks": [{"path": f"{path}/inner"}]},
        )
    )
    ds = wait(lambda: get(cluster, "daemonset", f"{name}-members-0", NS), "the tier group's DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert (
        env["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"] == path
        and env["MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY"] == "lru"
    )
    assert env["MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"] == str(1 << 30)
    assert pod["terminationGracePeriodSeconds"] == 65 and pod["initContainers"][0]["name"] == "tier-survey"
    assert {"name": "tier", "hostPath": {"path": path, "type": "Directory"}} in pod["volumes"]
    leader = get(cluster, "deployment", f"{name}-leader", NS)
    assert "-enable_offload=true" in leader["spec"]["template"]["spec"]["containers"][0]["args"]

    # The survey as the init container runs it, on a directory a predecessor left two entries in.
    left = tmp_path / "left"
    left.mkdir()
    (left / "1.bucket").write_text("x")
    (left / "1.meta").write_text("x")
    out = tmp_path / "message"
    assert run_script(pod["initContainers"][0]["command"], left, out).returncode == 0
    a = member_pod_on(cluster, name, NODES[0])
    report_survey(cluster, a, out.read_text())
    backend = wait(
        lambda: (b := get(cluster, "kvcachebackend", name)) and condition(b, "TierWasEmpty") and b,
        "TierWasEmpty",
        timeout=60,
    )
    verdict = condition(backend, "TierWasEmpty")
    assert (verdict["status"], verdict["reason"]) == (
        "False",
        "TierNotEmpty",
    ) and f"{NODES[0]} (2 entries)" in verdict["message"]
    events = cluster.kubectl_json(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )
    assert any(e["reason"] == "KVCacheTierNotEmpty" for e in events["items"])
    assert get(cluster, "configmap", f"{name}-tier-survey", NS) is not None  # the first-survey ledger
    # Written once: a clean answer from the other node, and a rollout of new members (editing what
    # the tier may hold re-renders the group; their surveys would read this backend's own data),
    # change nothing.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        run_script(pod["initContainers"][0]["command"], empty, out).returncode == 0
        and out.read_text() == "entries=0\n"
    )
    report_survey(cluster, member_pod_on(cluster, name, NODES[1]), out.read_text())
    cluster.kubectl(
        "patch",
        "kvcachebackend",
        name,
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "replace",
                    "path": "/spec/connection/managed/members/0/localDisks/0/capacity",
                    "value": "2Gi",
                }
            ]
        ),
    )
    generation = get(cluster, "kvcachebackend", name)["metadata"]["generation"]
    rolled = wait(
        lambda: (
            (b := get(cluster, "kvcachebackend", name))
            and (c := condition(b, "RolloutComplete")).get("status") == "True"
            and c.get("observedGeneration") == generation
            and b
        ),
        "the members replaced on the new template",
        timeout=180,
    )
    assert condition(rolled, "TierWasEmpty") == verdict

    cluster.kubectl("delete", "kvcachebackend", name, "--wait=false")
    clean_name = tr.cleanup_pod_name(name, NODES[0])
    cleanup = wait(lambda: get(cluster, "pod", clean_name, NS), "the cleanup Pod on node a", timeout=240)
    assert get(cluster, "daemonset", f"{name}-members-0", NS) is None  # the members went first
    assert (
        cleanup["spec"]["nodeName"] == NODES[0] and cleanup["spec"]["volumes"][0]["hostPath"]["path"] == path
    )
    assert get(cluster, "pod", tr.cleanup_pod_name(name, NODES[1]), NS) is None  # b is shared with the other
    deleting = get(cluster, "kvcachebackend", name)
    assert phase(deleting) == "Deleting" and NODES[0] in deleting["status"]["phaseMessage"]
    shared = wait(
        lambda: [
            e
            for e in cluster.kubectl_json(
                "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={NODES[1]}"
            )["items"]
            if e["reason"] == "KVCacheTierSharedPath"
        ],
        "the shared-path event on node b",
    )
    assert other in shared[0]["message"]
    # The cleanup as its container runs it, then what the kubelet reports when it exits 0.
    assert run_script(cleanup["spec"]["containers"][0]["command"], left).returncode == 0 and not list(
        left.iterdir()
    )
    done = {
        "phase": "Succeeded",
        "containerStatuses": [
            {
                "name": "clean",
                "image": cleanup["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            }
        ],
    }
    cluster.kubectl(
        "patch",
        "pod",
        clean_name,
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": done}),
    )
    wait(lambda: get(cluster, "kvcachebackend", name) is None, "the backend gone", timeout=120)
    for ledger in (f"{name}-tier-survey", f"{name}-tier-cleanup"):
        wait(lambda ledger=ledger: get(cluster, "configmap", ledger, NS) is None, f"{ledger} gone")
    cluster.kubectl("delete", "kvcachebackend", other, "--wait=false")
    wait(lambda: get(cluster, "kvcachebackend", other) is None, "the other backend gone", timeout=240)
