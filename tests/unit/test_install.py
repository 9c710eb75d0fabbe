"""The worker's start-up (operations spec D.5, D.8) over an in-memory apiserver: each step, two
replicas at once, a Kueue that is not there, the absence ensurers, the Settings status echo and the
uninstall cleanup."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable

import pytest

from api import constants, crds
from api import settings as registry
from controllers.install import applications, cleanup, plan, prepare
from controllers.install.ensurers import AbsenceEnsurer
from kube.client import Client
from tests.kube_fake import FakeApiServer

NS = constants.SYSTEM_NAMESPACE
ENDPOINT = plan.WebhookEndpoint(service="gpustack-operator-worker")


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class Establisher:
    """What the apiserver does for a new CRD: mark it Established (the fake store does not)."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.01):
            for key, obj in list(self.server.objects.items()):
                if key[1] == "customresourcedefinitions" and not (obj.get("status") or {}).get("conditions"):
                    done = dict(obj, status={"conditions": [{"type": "Established", "status": "True"}]})
                    self.server.put(done)


@pytest.fixture
def server():
    fake = FakeApiServer()
    establisher = Establisher(fake)
    yield fake
    establisher.stop.set()


@pytest.fixture
def client(server: FakeApiServer) -> Client:
    return Client(server)  # type: ignore[arg-type]


def _prepare(client: Client, startup: prepare.Startup | None = None, **kwargs) -> prepare.Prepare:
    seeds = registry.seed_all(kwargs.pop("env", {}))
    return prepare.Prepare(
        client,
        startup or prepare.Startup(),
        endpoint=kwargs.pop("endpoint", ENDPOINT),
        ca_bundle=lambda: b"CA PEM",
        seeds=seeds,
        worker_identity="system:serviceaccount:gpustack-system:gpustack-operator-worker",
        retry=0.01,
        max_retry=0.02,
        **kwargs,
    )


def _settings(client: Client) -> dict[str, str | None]:
    items, _ = client.list("Setting", NS)
    return {i["metadata"]["name"]: (i.get("spec") or {}).get("value") for i in items}


# --- steps 1-5 --------------------------------------------------------------------------------------


def test_core_steps_install_namespace_crds_webhooks_and_every_setting(client: Client) -> None:
    startup = prepare.Startup()
    _prepare(client, startup, env={"GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED": "true"}).core()
    assert client.get("Namespace", NS) is not None
    for crd in crds.render_all():
        assert client.get("CustomResourceDefinition", crd["metadata"]["name"]) is not None
    mutating = client.get("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION)
    validating = client.get("ValidatingWebhookConfiguration", constants.VALIDATING_CONFIGURATION)
    for config in (mutating, validating):
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == "gpustack-operator-worker"
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA PEM"
    stored = _settings(client)
    assert set(stored) == set(registry.SETTINGS) and len(stored) == len(registry.SETTINGS)
    assert stored["instance-privileged-allowed"] == "true"  # seeded from GPUSTACK_*
    assert stored["workload-fit-affinity"] == "true"  # the default
    assert startup.done(*prepare.STEPS[:6]) and not startup.ready()  # steps 7-9 still to come


def test_later_starts_backfill_and_never_overwrite(client: Client) -> None:
    _prepare(client).core()
    client.patch("Setting", "workload-fit-affinity", {"spec": {"value": "false"}}, namespace=NS)
    client.delete("Setting", "model-store-peer-sync", NS)
    again = _prepare(client, env={"GPUSTACK_WORKLOAD_FIT_AFFINITY": "true"})
    assert again.settings() == ["model-store-peer-sync"]
    assert _settings(client)["workload-fit-affinity"] == "false"


def test_two_replicas_at_once_converge(client: Client, server: FakeApiServer) -> None:
    errors: list[BaseException] = []

    def replica() -> None:
        try:
            _prepare(client).core()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=replica) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    stored = _settings(client)
    assert len(stored) == len(registry.SETTINGS)
    assert all(stored[name] == registry.SETTINGS[name].default for name in stored)
    creates = [path for method, path in server.requests if method == "POST" and path.endswith("/settings")]
    assert len(creates) >= len(registry.SETTINGS)  # the loser of each race got a 409, not a second object


def test_a_failing_step_is_retried_and_reported(client: Client, server: FakeApiServer) -> None:
    startup = prepare.Startup()
    server.fail("PATCH", "/apis/admissionregistration.k8s.io", 403, times=2)
    _prepare(client, startup).core()
    step = startup.steps[prepare.STEP_WEBHOOKS]
    assert step.state == "done" and step.attempts == 2


# --- steps 7-9 --------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_kueue_absent_is_retried_then_fails_naming_the_crd(client: Client, server: FakeApiServer) -> None:
    startup = prepare.Startup()
    server.fail("PATCH", "/apis/kueue.x-k8s.io", 404, times=1000)
    prep = _prepare(client, startup, crd_wait=5.0, clock=Clock())
    prep.core()
    with pytest.raises(prepare.StepFailed) as failed:
        prep.kueue_and_nfd()
    assert failed.value.step == prepare.STEP_NODE_DEVICES
    assert "Kueue's AdmissionCheck CRD is not served" in str(failed.value)
    report = "\n".join(startup.report())
    assert "[+]startup/node-feature-rule done" in report
    assert "[-]startup/admission-check-node-devices failed: Kueue's AdmissionCheck CRD" in report
    assert not startup.ready()


def test_kueue_arriving_late_completes_start_up(client: Client, server: FakeApiServer) -> None:
    startup = prepare.Startup()
    server.fail("PATCH", "/apis/kueue.x-k8s.io", 404, times=3)
    prep = _prepare(client, startup)
    prep.all()
    assert startup.ready()
    for name in (constants.ADMISSION_CHECK_NODE_DEVICES, constants.ADMISSION_CHECK_JOINT):
        check = client.get("AdmissionCheck", name)
        assert check["spec"]["controllerName"].startswith("worker.gpustack.ai/")
        assert "status" not in check  # spec only: the controllers mark it Active
    rule = client.get("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU)
    assert rule["metadata"]["labels"][constants.LABEL_PART_OF] == "gpustack-operator"


def test_the_rule_names_only_the_managed_manufacturers(client: Client) -> None:
    prep = _prepare(client, vendor_ids=["10de"])
    prep.node_feature_rule()
    rule = client.get("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU)
    vendors = rule["spec"]["rules"][1]["matchFeatures"][0]["matchExpressions"]["vendor"]["value"]
    assert vendors == ["10de"]


# --- absence ensurers --------------------------------------------------------------------------------


def test_ensurers_recreate_what_is_deleted_and_never_rewrite_what_exists(client: Client) -> None:
    prep = _prepare(client)
    prep.core()
    desired = prepare.desired_absent_only(
        [*plan.custom_resource_definitions(), *plan.webhook_configurations(ENDPOINT, b"CA PEM")]
    )
    ensurer = AbsenceEnsurer(client, lambda: desired)
    ensurer.start()
    try:
        assert _wait(ensurer.synced)
        client.delete("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION)
        client.delete("CustomResourceDefinition", "settings.gpustack.ai")
        assert _wait(lambda: client.get("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION))
        assert _wait(lambda: client.get("CustomResourceDefinition", "settings.gpustack.ai"))
        # An existing object someone edited is left as it is.
        client.patch(
            "ValidatingWebhookConfiguration",
            constants.VALIDATING_CONFIGURATION,
            {"metadata": {"annotations": {"edited": "yes"}}},
        )
        time.sleep(0.2)
        edited = client.get("ValidatingWebhookConfiguration", constants.VALIDATING_CONFIGURATION)
        assert edited["metadata"]["annotations"] == {"edited": "yes"}
        assert sorted(ensurer.recreated) == [
            ("CustomResourceDefinition", "settings.gpustack.ai"),
            ("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION),
        ]
    finally:
        ensurer.stop()


# --- plan --------------------------------------------------------------------------------------------


def test_missing_settings_are_the_unstored_ones_only() -> None:
    seeds = registry.seed_all({})
    created = plan.missing_settings(["workload-fit-affinity"], seeds)
    names = [o["metadata"]["name"] for o in created]
    assert "workload-fit-affinity" not in names and len(names) == len(registry.SETTINGS) - 1


def test_setting_status_echoes_the_value_or_the_default() -> None:
    status = plan.setting_status("model-store-high-watermark", None)
    assert status["value"] == "80" and status["editable"] is True and status["description"]
    assert plan.setting_status("model-store-high-watermark", "90")["value"] == "90"


def test_applications_check() -> None:
    assert applications.enabled_applications(["*"]) == []
    assert applications.enabled_applications(["kueue"])[0] == "node-feature-discovery"
    assert applications.unknown_applications(["*", "kueue", "dns"]) == ["dns"]


def test_webhook_endpoint_by_url() -> None:
    configs = plan.webhook_configurations(plan.WebhookEndpoint(url="https://127.0.0.1:9443"), b"ca")
    hook = configs[0]["webhooks"][0]
    assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:9443/mutate-")


# --- the Settings status echo ------------------------------------------------------------------------


def test_setting_status_reconciler_writes_the_value_column(client: Client) -> None:
    from controllers.install.settings import SettingStatusReconciler
    from kube.manager import Manager

    _prepare(client).core()
    client.patch("Setting", "model-store-high-watermark", {"spec": {"value": "90"}}, namespace=NS)
    manager = Manager(client, leader_election=False)
    controller = manager.add(SettingStatusReconciler)
    manager.start()
    try:
        assert _wait(lambda: controller.settings.synced())
        controller.reconcile("model-store-high-watermark")
        stored = client.get("Setting", "model-store-high-watermark", NS)
        assert stored["status"]["value"] == "90"
    finally:
        manager.stop()


# --- cleanup -----------------------------------------------------------------------------------------


def test_cleanup_deletes_webhooks_first_then_releases_finalizers_and_crds(
    client: Client, server: FakeApiServer
) -> None:
    _prepare(client).all()
    client.create(
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "InstanceType",
            "metadata": {"name": "t", "finalizers": [constants.FINALIZER_CONTROLLED, "example.com/keep"]},
            "spec": {},
        }
    )
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "gpustack-operator-worker-certs", "namespace": NS},
        }
    )
    server.requests.clear()
    deleted = cleanup.Cleanup(client, cert_secret="gpustack-operator-worker-certs").run()
    deletes = [path for method, path in server.requests if method == "DELETE"]
    assert "mutatingwebhookconfigurations" in deletes[0] and "validatingwebhookconfigurations" in deletes[1]
    assert deletes.index(next(d for d in deletes if "customresourcedefinitions" in d)) > deletes.index(
        next(d for d in deletes if "admissionchecks" in d)
    )
    assert client.get("InstanceType", "t")["metadata"]["finalizers"] == ["example.com/keep"]
    for crd in crds.render_all():
        assert client.get("CustomResourceDefinition", crd["metadata"]["name"]) is None
    assert client.get("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU) is None
    assert client.get("Secret", "gpustack-operator-worker-certs", NS) is None
    assert "Secret/gpustack-system/gpustack-operator-worker-certs" in deleted


def test_webhooks_only_deletes_the_two_configurations_and_nothing_else(
    client: Client, server: FakeApiServer
) -> None:
    _prepare(client).all()
    server.requests.clear()
    deleted = cleanup.Cleanup(client, cert_secret="x").webhooks()
    assert deleted == [
        f"MutatingWebhookConfiguration/{constants.MUTATING_CONFIGURATION}",
        f"ValidatingWebhookConfiguration/{constants.VALIDATING_CONFIGURATION}",
    ]
    assert [method for method, _ in server.requests if method not in ("GET",)] == ["DELETE", "DELETE"]
    assert client.get("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION) is None
    for crd in crds.render_all():  # CRDs, Settings and the rest stay: that is cleanupOnUninstall's
        assert client.get("CustomResourceDefinition", crd["metadata"]["name"]) is not None
    assert client.get("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU) is not None
    assert cleanup.Cleanup(client, cert_secret="x").webhooks() == []  # again: nothing left, no error


def test_cleanup_leaves_a_rule_that_is_not_ours(client: Client) -> None:
    rule = plan.cpu_info_rule()
    rule["metadata"]["labels"] = {}
    client.create(rule)
    cleanup.Cleanup(client, cert_secret="x").run()
    assert client.get("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU) is not None


def test_cleanup_waits_for_the_worker_pods(client: Client) -> None:
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "w", "namespace": NS, "labels": {"app.kubernetes.io/component": "worker"}},
        }
    )
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            client.delete("Pod", "w", NS)

    job = cleanup.Cleanup(
        client, cert_secret="x", worker_selector="app.kubernetes.io/component=worker", sleep=nap
    )
    assert job.workers_gone() and len(naps) == 3


def test_our_finalizers_only() -> None:
    assert cleanup.our_finalizers(
        ["gpustack.ai/controlled", "worker.gpustack.ai/instance-protection", "kubernetes.io/pvc-protection"]
    ) == ["gpustack.ai/controlled", "worker.gpustack.ai/instance-protection"]


def test_before_kueue_goes_deletes_the_worker_then_only_the_operators_kueue_objects(
    client: Client, server: FakeApiServer
) -> None:
    """The pre-delete hook of a release that installed Kueue: the worker Deployment first (nothing may
    recreate a pool), then the pools' Kueue objects and the AdmissionChecks, dependants first; a
    ClusterQueue that is not the operator's stays, and so does everything cleanup proper removes."""
    _prepare(client).all()
    client.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gpustack-operator-worker", "namespace": NS},
            "spec": {},
        }
    )
    pool = {constants.LABEL_RESOURCE_TYPE: "pool"}
    for kind, name, namespace in (
        ("ResourceFlavor", "gpustack--nvidia-a10g", ""),
        ("ClusterQueue", "gpustack-fnv64-1", ""),
        ("LocalQueue", "gpustack-fnv64-1", "team-a"),
    ):
        meta = {"name": name, "labels": pool, **({"namespace": namespace} if namespace else {})}
        client.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": {}})
    client.create(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "theirs"},
            "spec": {},
        }
    )
    server.requests.clear()
    deleted = cleanup.Cleanup(client, cert_secret="x", sleep=lambda _s: None).before_kueue_goes(
        "gpustack-operator-worker"
    )
    deletes = [path for method, path in server.requests if method == "DELETE"]
    assert "deployments/gpustack-operator-worker" in deletes[0]
    kinds = [d.split("/")[-2] for d in deletes[1:]]
    assert kinds.index("localqueues") < kinds.index("clusterqueues") < kinds.index("resourceflavors")
    assert "Deployment/gpustack-system/gpustack-operator-worker" in deleted
    assert client.get("ClusterQueue", "gpustack-fnv64-1") is None and client.get("ClusterQueue", "theirs")
    assert client.get("AdmissionCheck", constants.ADMISSION_CHECK_NODE_DEVICES) is None
    # Only Kueue's objects: the webhook configurations and the CRDs are the post-delete cleanup's.
    assert client.get("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION) is not None
    assert all("customresourcedefinitions" not in d for d in deletes)


def test_a_deleted_topology_kueue_still_holds_is_nudged_once_in_a_while(
    client: Client, server: FakeApiServer
) -> None:
    """Kueue leaves its in-use finalizer on a deleted Topology when its cache still listed a flavor
    the moment it looked; an update makes it look again. Only ours, only unreferenced, not too often."""
    ours = {constants.LABEL_RESOURCE_TYPE: constants.RESOURCE_TYPE_NODES}
    held = {"deletionTimestamp": "2026-12-06T01:44:00Z", "finalizers": [constants.KUEUE_RESOURCE_IN_USE]}
    for name in ("gpustack-fnv64-old", "gpustack-fnv64-named"):
        client.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
                       "metadata": {"name": name, "labels": ours, **held}, "spec": {"levels": []}})  # fmt: skip
    client.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                   "metadata": {"name": "f", "labels": ours}, "spec": {"topologyName": "gpustack-fnv64-named"}})  # fmt: skip
    job = cleanup.Cleanup(client, cert_secret="x", sleep=lambda _s: None)
    server.requests.clear()
    job._nudge_held_topologies()
    job._nudge_held_topologies()  # within KUEUE_NUDGE_SECONDS: nothing more
    patches = [path for method, path in server.requests if method == "PATCH"]
    assert len(patches) == 1 and patches[0].endswith("topologies/gpustack-fnv64-old")
    annotations = client.get("Topology", "gpustack-fnv64-old")["metadata"]["annotations"]
    assert constants.ANNOTATION_KUEUE_NUDGED_AT in annotations
    assert "annotations" not in client.get("Topology", "gpustack-fnv64-named")["metadata"]
