"""controllers.modeldeployment.controller, one pass at a time over an in-memory API (a recording
client; informer caches filled the way a watch fills them): the first pass creates every replica
and the finalizer; a converged deployment costs no write; a failed Pod list writes no status; a
render failure writes no Pod and says so."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.objects import Obj
from controllers.modeldeployment.controller import FINALIZER, ModelDeploymentReconciler
from kube.client import ApiError
from tests.unit.md_fixtures import NS, deployment, instance_type, role
from tests.unit.md_world import RecordingClient, admitted_workload, controller_on, informer_of


@pytest.fixture
def world():
    client = RecordingClient()
    return client, controller_on(client)


def put(client: RecordingClient, controller: ModelDeploymentReconciler, obj: Obj) -> None:
    """Store ``obj`` on the API and in the controller's cache of its kind, as a watch would."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    client.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    informer_of(controller, obj["kind"])._store("ADDED", obj)


def serve(client: RecordingClient, controller: ModelDeploymentReconciler) -> None:
    """Kueue and the kubelet: every Pod Ready, every group's Workload admitted; Services cached."""
    for (kind, _, _), obj in list(client.objects.items()):
        if kind == "Pod":
            obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            put(client, controller, obj)
            admission = {"podSetAssignments": [{"flavors": {"credits.gpustack.ai/nvidia": "a10g"}}]}
            put(client, controller, admitted_workload(obj, admission=admission))
    for (kind, _, _), obj in list(client.objects.items()):
        if kind == "Service":
            put(client, controller, obj)


def key(obj: Obj) -> tuple[str, str]:
    return (obj["metadata"]["namespace"], obj["metadata"]["name"])


def test_the_first_pass_adds_the_finalizer_creates_every_member_and_the_services(world) -> None:
    client, controller = world
    obj = deployment(role(replicas=2, size=2))
    obj["metadata"]["uid"] = "md-uid"
    put(client, controller, instance_type())
    put(client, controller, obj)
    controller.reconcile(key(obj))
    assert client.writes[0] == ("patch", "ModelDeployment", "qwen")  # the finalizer, first
    pods = sorted(name for verb, kind, name in client.writes if (verb, kind) == ("create", "Pod"))
    assert pods == [f"qwen-server-r{k}-m{m}" for k in range(2) for m in range(2)]
    services = sorted(name for verb, kind, name in client.writes if (verb, kind) == ("apply", "Service"))
    assert services == ["qwen", "qwen-server", "qwen-server-r0", "qwen-server-r1"]
    assert client.writes[-1] == ("update/status", "ModelDeployment", "qwen")


def test_a_converged_pass_writes_nothing(world) -> None:
    client, controller = world
    obj = deployment(role(replicas=2))
    obj["metadata"]["uid"] = "md-uid"
    obj["metadata"]["finalizers"] = [FINALIZER]
    put(client, controller, instance_type())
    put(client, controller, obj)
    applied: list[Obj] = []
    original_apply = client.apply

    def apply_and_store(body: Obj, **kw: Any) -> Obj:
        applied.append(body)
        return original_apply(body, **kw)

    client.apply = apply_and_store  # type: ignore[method-assign]
    captured: list[Obj] = []
    client.update = lambda body, subresource="": captured.append(body) or body  # type: ignore[method-assign]
    controller.reconcile(key(obj))
    for svc in applied:
        put(client, controller, {**svc, "metadata": {**svc["metadata"], "uid": "svc"}})
    serve(client, controller)
    # The status the first pass wrote becomes the stored object's; a second pass settles the
    # Ready counts; the third must be silent.
    for _ in range(2):
        stored = copy.deepcopy(client.objects[("ModelDeployment", NS, "qwen")])
        if captured:
            stored["status"] = captured[-1]["status"]
        put(client, controller, stored)
        client.writes.clear()
        captured.clear()
        controller.reconcile(key(stored))
    assert client.writes == [] and captured == []
    assert stored["status"]["phase"] == "Ready" and stored["status"]["roleSummary"] == "2S"
    assert len([k for k in client.objects if k[0] == "Pod"]) == 2


def test_a_failed_pod_list_writes_no_status(world) -> None:
    client, controller = world
    obj = deployment()
    obj["metadata"]["finalizers"] = [FINALIZER]
    put(client, controller, instance_type())
    put(client, controller, obj)
    client.fail_pod_list = True
    with pytest.raises(ApiError):
        controller.reconcile(key(obj))
    assert client.writes == []


def test_a_render_failure_writes_no_pod_and_says_so(world) -> None:
    client, controller = world
    obj = deployment()
    obj["metadata"]["finalizers"] = [FINALIZER]
    put(client, controller, instance_type(entrance=None))
    put(client, controller, obj)
    events: list[tuple[str, str]] = []
    controller.recorder.event = lambda o, kind, reason, message: events.append((kind, reason))  # type: ignore[method-assign]
    statuses: list[Obj] = []
    client.update = lambda body, subresource="": statuses.append(body) or body  # type: ignore[method-assign]
    assert controller.reconcile(key(obj)) == 15.0  # transient: requeued
    assert not [w for w in client.writes if w[1] == "Pod"]
    assert events == [("Warning", "RenderFailed")]
    assert "render failed" in statuses[-1]["status"]["phaseMessage"]


def test_a_pass_prunes_only_its_own_stale_services(world) -> None:
    """The Services a pass reads are its deployment's (the app-instance index): a stale one of its
    own goes, another deployment's in the same namespace stays."""
    from api import constants
    from controllers.modeldeployment import services

    client, controller = world
    obj = deployment(role())
    obj["metadata"]["uid"] = "md-uid"
    obj["metadata"]["finalizers"] = [FINALIZER]
    put(client, controller, instance_type())
    put(client, controller, obj)

    def service(name: str, instance: str, uid: str) -> Obj:
        return {
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {constants.LABEL_APP_INSTANCE: instance, services.LABEL_SERVICE_KIND: "instance"},
                "ownerReferences": [{"uid": uid, "controller": True}],
            },
        }

    put(client, controller, service("qwen-server-r7", "qwen", "md-uid"))  # a replica long gone
    put(client, controller, service("llama-server-r7", "llama", "llama-uid"))
    controller.reconcile(key(obj))
    deleted = [name for verb, kind, name in client.writes if (verb, kind) == ("delete", "Service")]
    assert deleted == ["qwen-server-r7"]


def test_an_instance_type_change_wakes_the_deployments_that_name_it(world) -> None:
    _, controller = world
    other = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
    for name, roles in (
        ("on-a10g", [role()]),
        ("on-both", [role(), role("decode", kind="Decode", instanceType=other)]),
        ("on-h100", [role(instanceType=other)]),
    ):
        controller.deployments._store("ADDED", deployment(*roles, name=name))
    changed = instance_type()
    old = copy.deepcopy(changed)
    changed["status"]["entrance"] = "elsewhere"
    woken = controller._on_instance_type("MODIFIED", changed, old)
    assert sorted(woken) == [(NS, "on-a10g"), (NS, "on-both")]
    counted = copy.deepcopy(changed)
    counted["metadata"]["resourceVersion"] = "9"
    counted["status"]["capacity"] = {"nvidia.com/gpu": "1"}  # a count only: no pass needs it
    assert controller._on_instance_type("MODIFIED", counted, changed) == ()
