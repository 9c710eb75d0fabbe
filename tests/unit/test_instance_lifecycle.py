"""The Instance lifecycle's decisions, the NodePort Service and the claim verdicts, purely."""

from __future__ import annotations

from api import constants
from controllers.instance import claims, lifecycle
from controllers.instance.pod import PodFacts, render_pod
from controllers.instance.service import drifted, render_service
from tests.unit.instances import UID, instance

# --- StopPolicy ---------------------------------------------------------------------------------------


def test_a_missing_deleting_or_inactive_type_stops_its_instances() -> None:
    assert "does not exist" in lifecycle.stop_reason(None, "gone")
    deleting = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Active"}}
    assert "being deleted" in lifecycle.stop_reason(deleting, "t")
    held = {
        "metadata": {},
        "status": {"phase": constants.PHASE_INACTIVE, "phaseMessage": "held: the type is inactive"},
    }
    assert lifecycle.stop_reason(held, "t") == "InstanceType t is Inactive (held: the type is inactive)"


def test_an_active_or_draining_type_lets_them_run() -> None:
    assert lifecycle.stop_reason({"metadata": {}, "status": {"phase": constants.PHASE_ACTIVE}}, "t") == ""
    assert lifecycle.stop_reason({"metadata": {}, "status": {"phase": constants.PHASE_DRAINING}}, "t") == ""


# --- Phases -----------------------------------------------------------------------------------------------


def test_stopped_is_the_whole_status() -> None:
    assert lifecycle.STOPPED_STATUS == {"phase": "Stopped"}


def test_stopping_keeps_the_last_run_until_the_pod_is_gone() -> None:
    live = {"phase": "Ready", "nodeName": "n", "ports": [{"port": 22}]}
    status = lifecycle.stopping_status(live)
    assert status["phase"] == "Stopping" and status["nodeName"] == "n" and status["ports"] == [{"port": 22}]


def test_an_instance_that_ran_starts_again() -> None:
    for phase in ("Stopping", "Stopped", "Ready"):
        assert lifecycle.restart_status({"phase": phase, "nodeName": "n"}) == {"phase": "Starting"}
    for phase in (None, "Queued", "Pending", "Starting"):
        assert lifecycle.restart_status({"phase": phase} if phase else None) is None


def test_ownership_is_by_controller_reference_uid() -> None:
    pod = render_pod(instance(), PodFacts(queue_name="q"))
    assert lifecycle.owns(instance(), pod)
    assert lifecycle.owner_key(pod) == ("team-a", "sliced-demo")
    other = instance()
    other["metadata"]["uid"] = "another"
    assert not lifecycle.owns(other, pod)
    assert not lifecycle.owns(
        instance(), {"metadata": {"ownerReferences": [{"kind": "Instance", "uid": UID}]}}
    )


# --- Service ----------------------------------------------------------------------------------------------


def test_node_port_service_names_ports_protocol_dash_port() -> None:
    obj = instance(ports=[{"port": 8888, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}])
    pod = render_pod(obj, PodFacts(queue_name="q", ssh_image="sshd"))
    service = render_service(obj, pod)
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"] == [
        {"name": "tcp-8888", "port": 8888, "targetPort": 8888, "protocol": "TCP"},
        {"name": "udp-53", "port": 53, "targetPort": 53, "protocol": "UDP"},
        {"name": "tcp-22", "port": 22, "targetPort": 22, "protocol": "TCP"},
    ]
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    assert service["metadata"]["ownerReferences"][0]["uid"] == UID


def test_a_port_less_pod_gets_no_service() -> None:
    obj = instance()
    del obj["spec"]["sshPublicKey"]
    assert render_service(obj, render_pod(obj, PodFacts(queue_name="q"))) is None


def test_allocated_node_ports_are_not_drift_changed_ports_are() -> None:
    obj = instance()
    pod = render_pod(obj, PodFacts(queue_name="q", ssh_image="sshd"))
    desired = render_service(obj, pod)
    live = {
        "spec": {
            **desired["spec"],
            "ports": [{**desired["spec"]["ports"][0], "nodePort": 30022}],
            "clusterIP": "10.96.0.9",
        }
    }
    assert not drifted(desired, live)
    live["spec"]["ports"][0]["port"] = 2222
    assert drifted(desired, live)


# --- Claims -------------------------------------------------------------------------------------------------


def _claim(phase: str, volume: str = "", storage_class: str = "local") -> dict:
    return {
        "metadata": {"name": "data"},
        "spec": {"volumeName": volume, "storageClassName": storage_class},
        "status": {"phase": phase},
    }


SELECTOR = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
    ]
}
PV = {"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": SELECTOR}}}


def test_a_bound_claim_pins_the_pod_to_its_volume() -> None:
    verdict = claims.verdict("data", _claim("Bound", "pv-1"), PV, None, placement=True)
    assert verdict.blocked == "" and verdict.node_selector == SELECTOR
    assert (
        claims.verdict("data", _claim("Bound", "pv-1"), {"spec": {}}, None, placement=True).node_selector
        is None
    )


def test_an_unbound_claim_creates_no_pod_and_says_so() -> None:
    verdict = claims.verdict(
        "data", _claim("Pending"), None, {"volumeBindingMode": "Immediate"}, placement=True
    )
    assert "PersistentVolumeClaim data is Pending, not bound" in verdict.blocked


def test_a_claim_binding_on_first_use_lets_the_pod_be_created() -> None:
    wait = {"volumeBindingMode": "WaitForFirstConsumer"}
    assert claims.verdict("data", _claim("Pending"), None, wait, placement=True).blocked == ""


def test_missing_or_deleting_claims_block_whatever_the_setting() -> None:
    assert (
        "does not exist; create the InstancePersistentVolume data"
        in claims.verdict("data", None, None, None, placement=False).blocked
    )
    going = {**_claim("Bound", "pv-1"), "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert "being deleted" in claims.verdict("data", going, PV, None, placement=True).blocked


def test_placement_off_builds_from_the_name_alone() -> None:
    verdict = claims.verdict("data", _claim("Pending"), None, None, placement=False)
    assert verdict == claims.ClaimVerdict()
