"""An Instance's status from its Pod (instances spec A.3, A.6 step 7), purely."""

from __future__ import annotations

import copy

import pytest

from api import allocation, constants
from controllers.instance import status as st
from controllers.instance.pod import PodFacts, render_pod
from controllers.instance.service import render_service
from tests.unit.instances import instance

M = 1_600_000
CARD = "gpu-a10g-0-nvidia-a10g-2"


def running_pod(**status) -> dict:
    pod = render_pod(instance(), PodFacts(queue_name="q", ssh_image="sshd"))
    pod["spec"]["nodeName"] = "gpu-a10g-0"
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "podIP": "10.0.0.7",
        "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}],
        "hostIP": "192.168.1.10",
        **status,
    }
    return pod


NODE = {
    "metadata": {"name": "gpu-a10g-0"},
    "status": {
        "addresses": [
            {"type": "InternalIP", "address": "192.168.1.10"},
            {"type": "Hostname", "address": "gpu-a10g-0"},
            {"type": "ExternalIP", "address": "203.0.113.5"},
            {"type": "InternalIP", "address": "fd00::10"},
        ]
    },
}


def service_with_node_ports(pod: dict, *node_ports: int) -> dict:
    service = render_service(instance(), pod)
    assert service is not None
    for port, node_port in zip(service["spec"]["ports"], node_ports, strict=False):
        port["nodePort"] = node_port
    return service


def ledger(mode: int = 3, allocated: int = 320_000) -> dict:
    return {
        "metadata": {"name": "gpu-a10g-0"},
        "status": {
            "groups": [
                {
                    "id": "nvidia-a10g",
                    "manufacturer": "nvidia",
                    "accelerators": [
                        {
                            "id": CARD,
                            "index": 2,
                            "mode": mode,
                            "allocated": allocated,
                            "remaining": M - allocated,
                        }
                    ],
                }
            ]
        },
    }


def record(container: str = "main", card: str = CARD, mode: int = 3, allocated: int = 320_000) -> dict:
    return {
        container: [
            {
                "id": "nvidia-a10g",
                "manufacturer": "nvidia",
                "accelerators": [
                    allocation.accelerator_entry(card, 2, mode, allocated, slices=1, remaining=1)
                ],
            }
        ]
    }


def annotate(pod: dict, value: dict | str) -> dict:
    pod = copy.deepcopy(pod)
    text = value if isinstance(value, str) else allocation.encode(value)
    pod["metadata"]["annotations"] = {constants.ANNOTATION_ACCELERATOR_ALLOCATED: text}
    return pod


# --- The whole status ---------------------------------------------------------------------------------


def test_ready_instance_says_where_to_connect() -> None:
    pod = annotate(running_pod(), record())
    status, waiting = st.from_pod(
        instance(), pod, service_with_node_ports(pod, 30022), NODE, ledger(), st.Access()
    )
    assert not waiting
    assert status == {
        "phase": "Ready",
        "nodeName": "gpu-a10g-0",
        "hostIPs": [{"ip": "203.0.113.5"}, {"ip": "192.168.1.10"}, {"ip": "fd00::10"}],
        "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}],
        "ports": [{"name": "ssh", "port": 22, "protocol": "TCP", "nodePort": 30022}],
        "allocations": [
            {
                "id": "nvidia-a10g",
                "manufacturer": "nvidia",
                "accelerators": [
                    {"id": CARD, "index": 2, "mode": 3, "allocated": 320_000, "allocatedSlices": 1}
                ],
            }
        ],
        "accessAddresses": ["203.0.113.5", "192.168.1.10", "fd00::10"],
    }


def test_node_ports_are_filled_only_once_every_port_has_one() -> None:
    obj = instance(ports=[{"port": 8888, "protocol": "TCP"}])
    pod = render_pod(obj, PodFacts(queue_name="q", ssh_image="sshd"))
    service = render_service(obj, pod)
    service["spec"]["ports"][0]["nodePort"] = 31888  # tcp-8888 has one, tcp-22 not yet
    ports, complete = st.status_ports(obj, service)
    assert not complete
    assert ports == [{"port": 8888, "protocol": "TCP"}, {"name": "ssh", "port": 22, "protocol": "TCP"}]
    service["spec"]["ports"][1]["nodePort"] = 32022
    ports, complete = st.status_ports(obj, service)
    assert complete
    assert [p["nodePort"] for p in ports] == [31888, 32022]


def test_a_running_instance_waits_for_its_node_ports() -> None:
    status, waiting = st.from_pod(instance(), running_pod(), None, NODE, None, st.Access())
    assert waiting and status["ports"] == [{"name": "ssh", "port": 22, "protocol": "TCP"}]


def test_no_ports_at_all_is_not_waiting() -> None:
    obj = instance()
    del obj["spec"]["sshPublicKey"]
    assert st.status_ports(obj, None) == ([], True)


def test_pod_ips_fall_back_to_pod_ip_and_host_ips_to_the_pod() -> None:
    pod = running_pod()
    del pod["status"]["podIPs"]
    assert st.pod_ips(pod) == [{"ip": "10.0.0.7"}]
    assert st.host_ips(None, pod) == [{"ip": "192.168.1.10"}]


def test_access_addresses_static_then_wildcard_then_host_ips() -> None:
    ips = [{"ip": "203.0.113.5"}, {"ip": "192.168.1.10"}]
    assert st.access_addresses(ips, st.Access(static_address=" gpu.example.com ")) == ["gpu.example.com"]
    assert st.access_addresses(ips, st.Access(wildcard_dns="nip.io")) == [
        "203.0.113.5.nip.io",
        "192.168.1.10.nip.io",
    ]
    assert st.access_addresses(ips, st.Access()) == ["203.0.113.5", "192.168.1.10"]


def test_a_pod_not_running_reports_only_its_phase() -> None:
    pod = running_pod(
        phase="Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    )
    status, waiting = st.from_pod(instance(), pod, None, NODE, ledger(), st.Access())
    assert status == {"phase": "Queued", "phaseMessage": "waiting for Kueue to admit it from queue q"}
    assert not waiting


# --- Phase ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "phase", "fragment"),
    [
        ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, "Ready", ""),
        (
            {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "main",
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    }
                ],
            },
            "CrashLoopBackOff",
            "container main: back-off",
        ),
        ({"phase": "Running"}, "Running", "ready"),
        (
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes",
                    }
                ],
            },
            "Unschedulable",
            "0/3 nodes",
        ),
        (
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "main",
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}},
                    }
                ],
            },
            "ImagePullBackOff",
            "no such image",
        ),
        ({"phase": "Pending"}, "Pending", "pending"),
        ({"phase": "Succeeded"}, "Completed", "exited"),
        ({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}, "Evicted", "low on memory"),
        (
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "sshd", "state": {"terminated": {"reason": "Error", "exitCode": 2}}}
                ],
            },
            "Error",
            "container sshd: exit code 2",
        ),
    ],
)
def test_pod_phase_summaries(status: dict, phase: str, fragment: str) -> None:
    got, message = st.pod_phase({"metadata": {}, "spec": {}, "status": status})
    assert got == phase and fragment in message


def test_a_gated_pod_is_queued_not_starting() -> None:
    # "Starting" would keep the user from stopping an Instance its queue never admits.
    pod = {
        "metadata": {"labels": {constants.KUEUE_QUEUE_NAME: "q"}},
        "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
        "status": {"phase": "Pending"},
    }
    assert st.pod_phase(pod)[0] == "Queued"


# --- Allocations -----------------------------------------------------------------------------------------


def test_allocations_keep_mains_cards_the_ledger_shows() -> None:
    value = {**record(), **record("sshd", mode=5, allocated=0)}
    groups = st.allocations(annotate(running_pod(), value), ledger())
    assert [a["id"] for g in groups for a in g["accelerators"]] == [CARD]
    assert groups[0]["accelerators"][0]["mode"] == 3


@pytest.mark.parametrize(
    ("value", "devices"),
    [
        (record(card="gpu-a10g-0-nvidia-a10g-7"), ledger()),  # a card the node does not have
        (record(mode=1, allocated=M), ledger()),  # claims the card whole; the ledger shows a slice
        (record(), ledger(mode=0, allocated=0)),  # the ledger shows the card free
        (record(allocated=800_000), ledger()),  # more than the ledger holds on the card
        (record(), None),  # no ledger read
        ("{not json", ledger()),  # not a record at all
        (record("debug"), ledger()),  # another container's entry
    ],
    ids=["unknown-card", "wrong-mode", "free-card", "over-claim", "no-ledger", "garbage", "other-container"],
)
def test_a_hand_edited_annotation_never_claims_a_card_the_ledger_does_not_show(value, devices) -> None:
    assert st.allocations(annotate(running_pod(), value), devices) == []


def test_a_partition_is_shown_only_with_its_profile_on_the_ledger() -> None:
    entry = allocation.accelerator_entry(CARD, 2, 4, 785_000, profile="3g.40gb", placements=[(0, 4)])
    value = {"main": [{"id": "nvidia-a10g", "manufacturer": "nvidia", "accelerators": [entry]}]}
    devices = ledger(mode=4, allocated=785_000)
    devices["status"]["groups"][0]["accelerators"][0]["allocatedProfiles"] = [{"name": "3g.40gb", "count": 1}]
    (group,) = st.allocations(annotate(running_pod(), value), devices)
    assert group["accelerators"][0]["allocatedPhysicalProfile"] == "3g.40gb"
    devices["status"]["groups"][0]["accelerators"][0]["allocatedProfiles"] = [{"name": "1g.10gb", "count": 1}]
    assert st.allocations(annotate(running_pod(), value), devices) == []


# --- Comparing -----------------------------------------------------------------------------------------


def test_status_is_compared_without_empty_fields() -> None:
    assert not st.changed({"phase": "Stopped", "ports": [], "phaseMessage": ""}, {"phase": "Stopped"})
    assert st.changed({"phase": "Stopped", "nodeName": "n"}, {"phase": "Stopped"})


def test_ready_is_true_exactly_in_phase_ready_and_keeps_its_time_while_it_holds() -> None:
    ready = st.with_ready({"phase": "Ready"}, None, 3, "2025-01-01T00:00:00Z")
    [cond] = ready["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "Ready",
        "True",
        "Ready",
        3,
    )
    assert cond["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    assert st.with_ready({"phase": "Ready"}, ready, 3, "2025-01-02T00:00:00Z") == ready
    for phase in (
        "Starting",
        "Queued",
        "Pending",
        "Running",
        "ImagePullBackOff",
        "Stopping",
        "Stopped",
        "Deleting",
    ):
        status = {"phase": phase, "phaseMessage": f"why {phase}"}
        [cond] = st.with_ready(status, ready, 3, "2025-01-02T00:00:00Z")["conditions"]
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", phase, f"why {phase}")
        assert cond["lastTransitionTime"] == "2025-01-02T00:00:00Z"
    stopped = st.with_ready({"phase": "Stopped"}, ready, 3, "2025-01-02T00:00:00Z")
    again = st.with_ready({"phase": "Starting"}, stopped, 4, "2025-01-03T00:00:00Z")
    assert again["conditions"][0]["lastTransitionTime"] == "2025-01-02T00:00:00Z"


def test_a_pod_reason_that_is_not_a_condition_reason_is_squeezed_into_one() -> None:
    [cond] = st.with_ready({"phase": "some odd phase-word"}, None, None, "t")["conditions"]
    assert cond["reason"] == "SomeOddPhaseWord" and cond["message"] == "some odd phase-word"
    assert "observedGeneration" not in cond
    [cond] = st.with_ready({"phase": ""}, None, None, "t")["conditions"]
    assert cond["reason"] == "NotReady"
