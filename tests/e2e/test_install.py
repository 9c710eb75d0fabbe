"""Installing the operator like an administrator does (issue 13; operations spec D.3-D.8): ``helm
install`` of the chart into the real control plane, the worker Pod running as the chart's
ServiceAccount on the process node (tests/cluster/process_node.py), its own start-up, Settings edits
through kubectl, an upgrade, two replicas handing the Lease over under a stream of admissions, and
``helm uninstall`` with and without ``cleanupOnUninstall``.

The module starts from a cluster without any of the operator's objects (earlier modules leave CRDs
and Settings behind; ``gpustack-operator cleanup`` removes them first) and leaves it that way.
Its tests run in order: each one is the next step of one installation's life.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import signal
import subprocess
import threading
import time

import chart
import nodes
import pytest
from cryptography import x509

from api import crds
from api import settings as registry
from certs import issue
from tests.cases import pods
from tests.net import served_serial

from .conftest import ensure_namespace, gpustack, harness

pytestmark = pytest.mark.e2e

NS = chart.NAMESPACE
SA = f"system:serviceaccount:{NS}:{chart.RELEASE}-worker"
NODE = "install-a10g"
SLOT = 9
POOL = "gpustack--nvidia-a10g-linux-amd64"
TENANT = "install-ha"
CRD_NAMES = sorted(c["metadata"]["name"] for c in crds.render_all())
MANUFACTURERS = ("amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead")


def get(cluster, *args: str):
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def _operator_cleanup(cluster) -> None:
    """``gpustack-operator cleanup`` as the admin, then wait for the CRDs to be really gone."""
    subprocess.run(
        [gpustack.PYTHON, "-m", "gpustack_operator", "cleanup", "--kubeconfig", str(cluster.kubeconfig)],
        cwd=gpustack.REPO,
        check=True,
        capture_output=True,
        env=cluster.env(),
        timeout=300,
    )
    _wait_crds_gone(cluster)


def _wait_crds_gone(cluster, timeout: float = 180) -> None:
    def gone() -> bool:
        present = cluster.kubectl_json("get", "crd", "-l", "app.kubernetes.io/part-of=gpustack-operator")
        return not present["items"]

    harness.wait_for(gone, timeout=timeout, what="the operator's CRDs to be deleted")


DM_LOG: list = []


def node_dm_log() -> str:
    """The device manager's log since it runs as its ServiceAccount (its last start)."""
    if not DM_LOG or not DM_LOG[0].exists():
        return ""
    text = DM_LOG[0].read_text(errors="replace")
    return text[text.rfind("=== ") :]


def _worker_log(host: chart.Host) -> str:
    return "\n".join(open(p["log"], errors="replace").read() for p in host.workers())


FIGURES: dict[str, float] = {}


def _figure(cluster, name: str, value: float) -> None:
    """A measured figure (never asserted): kept in <state>/install-figures.json for docs/performance.md."""
    FIGURES[name] = round(value, 1)
    (cluster.state_dir / "install-figures.json").write_text(json.dumps(FIGURES, indent=1))


def _lease_holder(cluster) -> str:
    lease = get(cluster, "lease", "worker.gpustack.ai", "-n", NS) or {}
    return (lease.get("spec") or {}).get("holderIdentity") or ""


@pytest.fixture(scope="module")
def host(cluster):
    if chart.installed(cluster):
        chart.uninstall(cluster, "--no-hooks")
    _operator_cleanup(cluster)
    node_host = chart.start_host(cluster)
    try:
        yield node_host
    finally:
        if chart.installed(cluster):
            chart.uninstall(cluster, "--no-hooks")
        chart.stop_host(node_host, info=cluster)
        _operator_cleanup(cluster)


@pytest.fixture(scope="module")
def gpu_node(cluster):
    """A kwok node with four simulated A10Gs, whose publish-only device manager then runs again as
    the chart's device-manager ServiceAccount (a kwok node has no kubelet to run its DaemonSet Pod)."""
    holder = {}

    def start() -> None:
        node = holder["node"] = nodes.start_node(cluster, NODE, "a10g-4.yaml", slot=SLOT, real=False)
        nodes.stop_component(node, "device-manager")
        kubeconfig = chart.token_kubeconfig(
            cluster, f"{chart.RELEASE}-device-manager", node.directory / "sa.kubeconfig"
        )
        env = {k: v for k, v in cluster.env().items() if not k.lower().endswith("_proxy")}
        argv = [*nodes._dm_argv(cluster, node), "--kubeconfig", str(kubeconfig)]
        nodes._launch(node, "device-manager", argv, env)
        DM_LOG[:] = [node.log_file("device-manager")]

    yield start
    node = holder.get("node")
    if node is not None:
        nodes.stop_node(node)
    cluster.kubectl("delete", "node", NODE, "--ignore-not-found")
    cluster.kubectl("delete", "devices", NODE, "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", TENANT, "--ignore-not-found", "--wait=false", check=False)


# --- the chart refuses wrong input before anything is created ---------------------------------------


def test_a_wrong_typed_value_fails_the_install_naming_it(cluster, host):
    refused = chart.helm(
        cluster,
        "install", chart.RELEASE, str(chart.CHART), "--namespace", NS, "--create-namespace",
        "--set", "worker.replicas=two",
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "at '/worker/replicas'" in refused.stderr and "want integer" in refused.stderr, refused.stderr
    assert not chart.installed(cluster)


# --- install -----------------------------------------------------------------------------------------


def test_install_creates_every_object_and_the_worker_starts_as_its_service_account(cluster, host):
    started = time.monotonic()
    chart.install(cluster, chart.local_values(host))
    workers = chart.wait_workers_ready(cluster, replicas=1)
    _figure(cluster, "install_to_ready_s", time.monotonic() - started)
    # What the chart rendered.
    for kind, name in [
        ("deployment", f"{chart.RELEASE}-worker"),
        ("service", f"{chart.RELEASE}-worker"),
        ("serviceaccount", f"{chart.RELEASE}-worker"),
        ("serviceaccount", f"{chart.RELEASE}-device-manager"),
        ("serviceaccount", f"{chart.RELEASE}-model-manager"),
        ("daemonset", f"{chart.RELEASE}-model-manager"),
        ("configmap", f"{chart.RELEASE}-kueue-manager-config"),
        ("service", f"{chart.RELEASE}-device-manager"),
    ]:
        assert get(cluster, kind, name, "-n", NS) is not None, (kind, name)
    for manufacturer in MANUFACTURERS:
        ds = get(cluster, "daemonset", f"{chart.RELEASE}-device-manager-{manufacturer}", "-n", NS)
        assert ds is not None, manufacturer
        selector = ds["spec"]["template"]["spec"]["nodeSelector"]
        assert any(k.startswith("feature.node.kubernetes.io/pci-") for k in selector)
    for name in ("clusterrole", "clusterrolebinding"):
        for component in ("worker", "device-manager", "model-manager"):
            assert get(cluster, name, f"{chart.RELEASE}-{component}") is not None
    assert get(cluster, "csidriver", "model.csi.gpustack.ai") is not None
    runtime_classes = {
        rc["metadata"]["name"] for rc in cluster.kubectl_json("get", "runtimeclasses")["items"]
    }
    assert {"nvidia", "ascend", "mthreads", "iluvatar"} <= runtime_classes
    assert "cambricon" not in runtime_classes  # no runtimeInjects* fact: no class conjured
    assert get(cluster, "pdb", f"{chart.RELEASE}-worker", "-n", NS) is None  # disabled by default
    # What the worker's start-up applied, as its ServiceAccount.
    assert f'"identity":"{SA}"' in _worker_log(host)
    for name in CRD_NAMES:
        assert get(cluster, "crd", name) is not None, name
    secret = get(cluster, "secret", f"{chart.RELEASE}-worker-certs", "-n", NS)
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for kind, name in [
        ("mutatingwebhookconfiguration", "gpustack-worker-mutation"),
        ("validatingwebhookconfiguration", "gpustack-worker-validation"),
    ]:
        config = get(cluster, kind, name)
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["url"].startswith(host.url)
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
    assert get(cluster, "nodefeaturerule", "gpustack-cpu-info") is not None
    for check in ("gpustack-node-devices", "gpustack-model-deployment-joint"):
        harness.wait_for(
            lambda check=check: any(
                c["type"] == "Active" and c["status"] == "True"
                for c in ((get(cluster, "admissioncheck", check) or {}).get("status") or {}).get(
                    "conditions", []
                )
            ),
            timeout=60,
            what=f"AdmissionCheck {check} Active",
        )
    assert _lease_holder(cluster).startswith(workers[0] + "_")
    # Every Setting, seeded, with its VALUE column.
    settings = cluster.kubectl_json("get", "settings", "-n", NS)["items"]
    assert sorted(s["metadata"]["name"] for s in settings) == sorted(registry.SETTINGS)
    harness.wait_for(
        lambda: all(
            (s.get("status") or {}).get("value") is not None
            for s in cluster.kubectl_json("get", "settings", "-n", NS)["items"]
        ),
        timeout=60,
        what="every Setting's status value",
    )
    table = cluster.kubectl("get", "settings", "-n", NS, "workload-fit-affinity").stdout
    assert "VALUE" in table.splitlines()[0] and "true" in table.splitlines()[1]


def test_ensurers_recreate_what_is_deleted_and_leave_what_exists(cluster, host):
    cluster.kubectl(
        "annotate", "mutatingwebhookconfiguration", "gpustack-worker-mutation", "e2e.gpustack.ai/edited=yes"
    )
    cluster.kubectl("delete", "validatingwebhookconfiguration", "gpustack-worker-validation")
    cluster.kubectl("delete", "crd", "modelprefetches.worker.gpustack.ai")  # no ModelPrefetch exists here
    harness.wait_for(
        lambda: get(cluster, "validatingwebhookconfiguration", "gpustack-worker-validation"),
        timeout=60,
        what="the validating configuration recreated",
    )
    harness.wait_for(
        lambda: (
            (crd := get(cluster, "crd", "modelprefetches.worker.gpustack.ai"))
            and not crd["metadata"].get("deletionTimestamp")
        ),
        timeout=120,
        what="the ModelPrefetch CRD recreated",
    )
    edited = get(cluster, "mutatingwebhookconfiguration", "gpustack-worker-mutation")
    assert edited["metadata"]["annotations"]["e2e.gpustack.ai/edited"] == "yes"  # never rewritten
    assert '"msg":"recreated a deleted object"' in _worker_log(host)


def test_the_worker_reconciles_with_its_own_rbac(cluster, host, gpu_node):
    gpu_node()
    ensure_namespace(cluster, TENANT)
    entrance = harness.wait_for(
        lambda: ((get(cluster, "instancetype", POOL) or {}).get("status") or {}).get("entrance"),
        timeout=120,
        what="the A10G InstanceType's entrance",
    )
    harness.wait_for(
        lambda: get(cluster, "localqueue", entrance, "-n", TENANT) is not None,
        timeout=60,
        what="the LocalQueue in the tenant namespace",
    )
    node = get(cluster, "node", NODE)
    assert "nvidia.com/gpu.sliced.units" in node["status"]["capacity"]  # node status patched
    assert get(cluster, "nodefeature", f"{NODE}-gpustack-worker", "-n", NS) is not None
    # The device manager, now its ServiceAccount, keeps publishing: its ledger is rewritten.
    harness.wait_for(
        lambda: "published Devices spec and NodeFeature" in node_dm_log(),
        timeout=60,
        what="the device manager to publish as its ServiceAccount",
    )
    assert "sa.kubeconfig" in node_dm_log().splitlines()[0]
    # The InstanceTypeFlavor catalog: written by the worker's account, read-only to everyone else.
    harness.wait_for(
        lambda: get(cluster, "instancetypeflavor", "gpustack--nvidia-a10g") is not None,
        timeout=60,
        what="the A10G catalog entry",
    )
    refused = cluster.kubectl("delete", "instancetypeflavor", "gpustack--nvidia-a10g", check=False)
    assert refused.returncode != 0 and "read-only catalog" in refused.stderr, refused.stderr
    for name, log in (("worker", _worker_log(host)), ("device manager", node_dm_log())):
        # A status 403, not the digits of a timestamp or a duration ("…45.403Z" read as one once).
        denied = [
            line
            for line in log.splitlines()
            if re.search(r"(?<![.\d])403(?![.\d])", line) or "Forbidden" in line
        ]
        assert denied == [], (name, denied[:5])


def _scrape(port: int, token: str | None) -> tuple[int, str]:
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=ssl._create_unverified_context(), timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_metrics_answer_only_a_scraper_the_apiserver_allows(cluster, host):
    """metrics.auth.enabled, the chart's default (docs/metrics.md): the worker, as its own
    ServiceAccount, asks the apiserver who scrapes — 401 without a token, 403 for an account not
    bound to gpustack-operator-metrics-reader, the state gauges for one that is."""
    port = next(p["port"] for p in host.workers() if p["ready"] and p["port"])
    ensure_namespace(cluster, TENANT)
    cluster.kubectl("create", "serviceaccount", "scraper", "-n", TENANT, check=False)
    token = cluster.kubectl("create", "token", "scraper", "-n", TENANT).stdout.strip()
    assert _scrape(port, None)[0] == 401
    assert _scrape(port, token)[0] == 403
    binding = "e2e-install-metrics-scraper"
    cluster.kubectl(
        "create", "clusterrolebinding", binding,
        "--clusterrole=gpustack-operator-metrics-reader", f"--serviceaccount={TENANT}:scraper",
    )  # fmt: skip
    try:

        def let_in() -> str | None:
            status, text = _scrape(port, token)
            return text if status == 200 else None

        # A refusal is remembered for 10 s: the binding is seen once it expires.
        text = harness.wait_for(let_in, timeout=60, what="the bound scraper to be let in")
        assert f'gpustack_instance_type_capacity{{instance_type="{POOL}",view="exclusive"}}' in text
        assert f'gpustack_node_cards{{manufacturer="nvidia",mode="none",node="{NODE}"}}' in text
        assert "gpustack_worker_leader 1.0" in text and "gpustack_build_info{" in text
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found", check=False)


# --- Settings through kubectl --------------------------------------------------------------------------


def _patch(cluster, name: str, value) -> subprocess.CompletedProcess:
    return cluster.kubectl(
        "-n", NS, "patch", "setting", name, "--type", "merge", "-p", json.dumps({"spec": {"value": value}}),
        check=False,
    )  # fmt: skip


def test_settings_edits_are_validated_and_shown(cluster, host):
    assert _patch(cluster, "workload-fit-affinity", "false").returncode == 0
    harness.wait_for(
        lambda: (
            (get(cluster, "setting", "workload-fit-affinity", "-n", NS).get("status") or {}).get("value")
            == "false"
        ),
        timeout=30,
        what="the VALUE column to follow the edit",
    )
    refused = _patch(cluster, "model-store-download-concurrency", "65")
    assert refused.returncode != 0
    assert "model-store-download-concurrency" in refused.stderr and "between 1 and 64" in refused.stderr
    crossed = _patch(cluster, "model-store-low-watermark", "85")
    assert crossed.returncode != 0 and "below model-store-high-watermark (80)" in crossed.stderr
    wrong_type = _patch(cluster, "workload-fit-affinity", False)
    assert wrong_type.returncode != 0 and "spec.value" in wrong_type.stderr
    unknown = cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "gpustack.ai/v1",
                "kind": "Setting",
                "metadata": {"name": "gpu-turbo-mode", "namespace": NS},
                "spec": {"value": "true"},
            }
        ),
        check=False,
    )
    assert unknown.returncode != 0 and "no such setting" in unknown.stderr
    deleted = cluster.kubectl("-n", NS, "delete", "setting", "instance-privileged-allowed", check=False)
    assert deleted.returncode != 0 and "cannot be deleted" in deleted.stderr
    assert get(cluster, "setting", "instance-privileged-allowed", "-n", NS) is not None


# --- upgrade -----------------------------------------------------------------------------------------------


def test_upgrade_rolls_the_worker_and_keeps_settings(cluster, host):
    before = get(cluster, "deployment", f"{chart.RELEASE}-worker", "-n", NS)
    daemonsets = {
        d["metadata"]["name"]: d["metadata"]["generation"]
        for d in cluster.kubectl_json("get", "daemonsets", "-n", NS)["items"]
    }
    old_pods = set(chart.ready_workers(cluster))
    # A changed value that only the worker reads: a new seed for a Setting that already exists.
    values = chart.local_values(host, worker={"env": {"GPUSTACK_WORKLOAD_FIT_AFFINITY": "true"}})
    started = time.monotonic()
    chart.install(cluster, values)
    after = get(cluster, "deployment", f"{chart.RELEASE}-worker", "-n", NS)
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    new_pods = harness.wait_for(
        lambda: (
            (names := set(chart.wait_workers_ready(cluster, replicas=1))) and not (names & old_pods) and names
        ),
        timeout=180,
        what="the worker rolled to a new Pod",
    )
    assert new_pods
    _figure(cluster, "upgrade_rolled_s", time.monotonic() - started)
    for name, generation in daemonsets.items():  # nothing else rolled
        assert get(cluster, "daemonset", name, "-n", NS)["metadata"]["generation"] == generation, name
    # The stored value stays: a seed never overwrites.
    assert get(cluster, "setting", "workload-fit-affinity", "-n", NS)["spec"]["value"] == "false"


# --- two replicas ------------------------------------------------------------------------------------------


def _pool_objects(cluster) -> dict[str, list[str]]:
    out = {}
    for kind in ("resourceflavors", "clusterqueues", "localqueues", "instancetypes", "admissionchecks"):
        items = cluster.kubectl_json("get", kind, "-A")["items"]
        out[kind] = sorted(f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}" for i in items)
    return out


HA_VALUES = {
    "replicas": 2,
    "podDisruptionBudget": {"enabled": True},
    "env": {"GPUSTACK_WORKLOAD_FIT_AFFINITY": "true"},
    "extraArgs": ["--cert-check-interval=2s"],
}


def test_two_replicas_hand_over_without_refusing_an_admission(cluster, host):
    chart.install(cluster, chart.local_values(host, worker=HA_VALUES))
    workers = chart.wait_workers_ready(cluster, replicas=2)
    assert get(cluster, "pdb", f"{chart.RELEASE}-worker", "-n", NS)["spec"]["minAvailable"] == 1

    def current_leader() -> dict | None:
        holder = _lease_holder(cluster)
        return next(
            (
                p
                for p in host.workers()
                if p["name"] in workers and holder.startswith(p["name"] + "_") and p["pid"]
            ),
            None,
        )

    leader = harness.wait_for(current_leader, timeout=90, what="one of the two replicas holding the Lease")
    holder = _lease_holder(cluster)
    objects_before = _pool_objects(cluster)
    ensure_namespace(cluster, TENANT)
    pod = pods.case_pod(pods.CASES[0])
    pod["metadata"].update(name="ha-probe", namespace=TENANT)
    failures: list[tuple[float, str]] = []  # (when the kubectl started, what it printed)
    count = 0
    done = threading.Event()

    def admit_continuously() -> None:
        nonlocal count
        while not done.is_set():
            started = time.monotonic()
            result = cluster.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
            )
            count += 1
            if result.returncode != 0:
                failures.append((started, result.stderr))

    thread = threading.Thread(target=admit_continuously)
    thread.start()
    try:
        harness.wait_for(lambda: count >= 3, timeout=60, what="admissions before the kill")
        killed_at = time.monotonic()
        os.killpg(leader["pid"], signal.SIGKILL)
        new_holder = harness.wait_for(
            lambda: (h := _lease_holder(cluster)) != holder and h,
            timeout=60,
            what="the Lease to change hands",
        )
        handover = time.monotonic() - killed_at
        at_handover = count
        harness.wait_for(lambda: count >= at_handover + 5, timeout=120, what="admissions after the handover")
    finally:
        done.set()
        thread.join(120)
    _figure(cluster, "handover_s", handover)
    _figure(cluster, "admissions_during_handover", count)
    # A SIGKILL takes the one request the killed replica was answering with it (a Service, like
    # kube-proxy, does not replay a POST on another Pod): at most that one fails, as a reset
    # connection, never as a refusal. Every admission sent after the kill is answered.
    in_flight = [text for started, text in failures if started < killed_at]
    after_kill = [text for started, text in failures if started >= killed_at]
    assert after_kill == [], after_kill[:3]
    assert len(in_flight) <= 1 and all("connection reset" in t or "EOF" in t for t in in_flight), in_flight
    assert new_holder != holder and count > 8
    # The new leader reconciles: the pool's objects are the same, none twice.
    harness.wait_for(
        lambda: len(chart.ready_workers(cluster)) == 2, timeout=120, what="two Ready workers again"
    )
    assert _pool_objects(cluster) == objects_before
    assert len(workers) == 2


def _serials(host: chart.Host, ca: str) -> set[int]:
    return {served_serial(p["port"], ca) for p in host.workers() if p["ready"] and p["port"]}


def test_the_certificate_rotates_before_expiry_and_every_replica_reloads(cluster, host, tmp_path):
    name = f"{chart.RELEASE}-worker-certs"
    stored = get(cluster, "secret", name, "-n", NS)
    data = {k: base64.b64decode(v) for k, v in stored["data"].items()}
    ca = tmp_path / "ca.crt"
    ca.write_bytes(data["ca.crt"])
    harness.wait_for(lambda: len(_serials(host, str(ca))) == 1, timeout=60, what="both replicas on one pair")
    # Time passes: the pair in the Secret now expires in a day, inside the 30-day window.
    dns, ips = issue.sans_of_pem(data["tls.crt"])
    cert, key = issue.new_serving(
        data["ca.crt"], data["ca.key"], sorted(dns), sorted(ips), dt.timedelta(days=1)
    )
    short = x509.load_pem_x509_certificate(cert).serial_number
    patch = {"data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()}}
    cluster.kubectl("-n", NS, "patch", "secret", name, "--type", "merge", "-p", json.dumps(patch))

    def rotated() -> int | None:
        current = base64.b64decode(get(cluster, "secret", name, "-n", NS)["data"]["tls.crt"])
        serial = x509.load_pem_x509_certificate(current).serial_number
        left = issue.remaining_pem(current)
        return serial if serial != short and left and left.days > 300 else None

    fresh = harness.wait_for(rotated, timeout=60, what="a replica to rotate the expiring pair")
    harness.wait_for(
        lambda: _serials(host, str(ca)) == {fresh}, timeout=60, what="every replica to reload it"
    )
    assert base64.b64decode(get(cluster, "secret", name, "-n", NS)["data"]["ca.crt"]) == data["ca.crt"]


# --- uninstall -----------------------------------------------------------------------------------------------


def test_uninstall_without_cleanup_leaves_what_the_worker_made(cluster, host, gpu_node):
    chart.uninstall(cluster)
    harness.wait_for(lambda: not host.workers(), timeout=120, what="the worker processes to stop")
    for kind in ("deployment", "daemonset", "service", "serviceaccount", "configmap", "pdb"):
        left = cluster.kubectl_json(
            "get", kind, "-n", NS, "-l", f"app.kubernetes.io/instance={chart.RELEASE}"
        )
        assert left["items"] == [], kind
    for kind in ("clusterrole", "clusterrolebinding", "csidriver", "runtimeclass"):
        left = cluster.kubectl_json("get", kind, "-l", f"app.kubernetes.io/instance={chart.RELEASE}")
        assert left["items"] == [], kind
    # Left behind, as the spec says: what the worker applied at run time.
    for name in CRD_NAMES:
        assert get(cluster, "crd", name) is not None, name
    assert len(cluster.kubectl_json("get", "settings", "-n", NS)["items"]) == len(registry.SETTINGS)
    assert get(cluster, "setting", "workload-fit-affinity", "-n", NS)["spec"]["value"] == "false"
    assert get(cluster, "nodefeaturerule", "gpustack-cpu-info") is not None
    assert get(cluster, "admissioncheck", "gpustack-node-devices") is not None
    assert get(cluster, "secret", f"{chart.RELEASE}-worker-certs", "-n", NS) is not None
    # Removed by every uninstall (the default post-delete hook): they fail closed, and with no
    # worker left they would refuse every queued Pod. Such a Pod is admitted now.
    assert get(cluster, "mutatingwebhookconfiguration", "gpustack-worker-mutation") is None
    assert get(cluster, "validatingwebhookconfiguration", "gpustack-worker-validation") is None
    assert get(cluster, "job", f"{chart.RELEASE}-cleanup-webhooks", "-n", NS) is None  # hook-succeeded
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "after-uninstall", "namespace": "default",
                     "labels": {"kueue.x-k8s.io/queue-name": "some-queue"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
        assert get(cluster, "pod", "after-uninstall", "-n", "default") is not None
    finally:
        cluster.kubectl("delete", "pod", "after-uninstall", "-n", "default", "--wait=false", check=False)


def test_reinstall_keeps_settings_and_cleanup_on_uninstall_removes_the_rest(cluster, host, gpu_node):
    chart.install(cluster, chart.local_values(host, cleanupOnUninstall=True))
    chart.wait_workers_ready(cluster, replicas=1)
    assert get(cluster, "setting", "workload-fit-affinity", "-n", NS)["spec"]["value"] == "false"
    chart.uninstall(cluster, timeout=400)
    for name in CRD_NAMES:
        assert get(cluster, "crd", name) is None or get(cluster, "crd", name)["metadata"].get(
            "deletionTimestamp"
        )
    _wait_crds_gone(cluster)
    assert get(cluster, "mutatingwebhookconfiguration", "gpustack-worker-mutation") is None
    assert get(cluster, "validatingwebhookconfiguration", "gpustack-worker-validation") is None
    assert get(cluster, "nodefeaturerule", "gpustack-cpu-info") is None
    for check in ("gpustack-node-devices", "gpustack-model-deployment-joint"):
        assert get(cluster, "admissioncheck", check) is None
    assert get(cluster, "secret", f"{chart.RELEASE}-worker-certs", "-n", NS) is None
    assert get(cluster, "lease", "worker.gpustack.ai", "-n", NS) is None
    assert not [
        r for r in cluster.kubectl_json("get", "resourceflavors")["items"] if "a10g" in r["metadata"]["name"]
    ]
    # The hook's own objects went with it (hook-succeeded).
    assert get(cluster, "job", f"{chart.RELEASE}-cleanup", "-n", NS) is None
    assert get(cluster, "clusterrole", f"{chart.RELEASE}-cleanup") is None
