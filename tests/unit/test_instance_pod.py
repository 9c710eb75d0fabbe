"""The Instance's Pod and container resources (instances spec A.7, A.8), rendered purely."""

from __future__ import annotations

import pytest

from api import constants
from api.manufacturers import BY_NAME
from controllers.instance.pod import PodFacts, merge_node_selectors, render_pod
from controllers.instance.resources import accelerator_request, general_limits, general_requests
from tests.unit.instances import UID, instance

NVIDIA = BY_NAME["nvidia"]
QUEUE = "gpustack-fnv64-c4680bb149644f1c"
SSH_IMAGE = "gpustack/ssh-server:v1.3.0"


def facts(**kwargs) -> PodFacts:
    return PodFacts(**{"queue_name": QUEUE, "maker": NVIDIA, "ssh_image": SSH_IMAGE, **kwargs})


def container(pod: dict, name: str) -> dict:
    (found,) = [x for x in pod["spec"]["containers"] if x["name"] == name]
    return found


# --- The Pod -------------------------------------------------------------------------------------------


def test_seed_instance_renders_queued_owned_and_sharing_its_namespaces() -> None:
    pod = render_pod(instance(), facts())
    meta = pod["metadata"]
    assert (meta["name"], meta["namespace"]) == ("sliced-demo", "team-a")
    assert meta["labels"] == {
        constants.KUEUE_QUEUE_NAME: QUEUE,
        constants.LABEL_PART_OF: UID,
        constants.LABEL_OWNED_BY_INSTANCES: "instances",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "Instance",
            "name": "sliced-demo",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = pod["spec"]
    assert spec["hostIPC"] is True and spec["shareProcessNamespace"] is True
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert "nodeName" not in spec and "nodeSelector" not in spec and "runtimeClassName" not in spec
    assert "imagePullSecrets" not in spec and "affinity" not in spec
    assert [x["name"] for x in spec["containers"]] == ["main", "sshd"]


def test_main_is_the_users_container_run_as_root_with_the_workspace() -> None:
    spec = instance(
        env=[{"name": "A", "value": "1"}],
        ports=[{"port": 8888, "protocol": "TCP", "name": "jupyter"}, {"port": 53, "protocol": "UDP"}],
        volumeMount="/home/work",
    )["spec"]
    main = container(render_pod({**instance(), "spec": spec}, facts()), "main")
    assert main["image"] == "ubuntu:24.04" and main["imagePullPolicy"] == "IfNotPresent"
    assert main["command"] == ["tail", "-f", "/dev/null"]
    assert main["env"] == [{"name": "A", "value": "1"}]
    assert main["ports"] == [
        {"containerPort": 8888, "protocol": "TCP", "name": "jupyter"},
        {"containerPort": 53, "protocol": "UDP"},
    ]
    assert main["securityContext"] == {"runAsUser": 0}
    assert main["volumeMounts"] == [{"name": "workspace", "mountPath": "/home/work"}]


def test_privileged_main_and_a_port_name_kubernetes_would_refuse() -> None:
    obj = instance(privileged=True, ports=[{"port": 22222, "name": "Bad_Name"}])
    main = container(render_pod(obj, facts()), "main")
    assert main["securityContext"] == {"runAsUser": 0, "privileged": True}
    assert main["ports"] == [{"containerPort": 22222, "protocol": "TCP"}]  # the Service names ports itself


def test_sshd_sidecar_shares_the_card_by_visibility_and_mounts_the_keys_read_only() -> None:
    pod = render_pod(instance(), facts(ssh_image="registry.local/mirror/ssh-server:v1.3.0"))
    sshd = container(pod, "sshd")
    assert sshd["image"] == "registry.local/mirror/ssh-server:v1.3.0"
    assert sshd["stdin"] is True and sshd["tty"] is True
    assert sshd["securityContext"]["capabilities"] == {"add": ["SYS_ADMIN", "SYS_PTRACE"]}
    assert sshd["env"] == [{"name": "VOLUME_MOUNT_PATH", "value": "/workspace"}]
    assert sshd["resources"] == {
        "limits": {"device.gpustack.ai/nvidia.visibility": "1"},
        "requests": {"device.gpustack.ai/nvidia.visibility": "1"},
    }
    assert sshd["volumeMounts"] == [
        {"name": "sshd-authorized-keys", "mountPath": "/var/run/sshd-authorized-keys", "readOnly": True}
    ]
    (keys,) = [v for v in pod["spec"]["volumes"] if v["name"] == "sshd-authorized-keys"]
    assert keys["secret"]["secretName"] == "workspace-key"
    assert keys["secret"]["defaultMode"] == 0o600
    # sshd asks for no CPU or memory: only the visibility resource.
    assert set(sshd["resources"]["limits"]) == {"device.gpustack.ai/nvidia.visibility"}


def test_without_a_key_there_is_no_sidecar() -> None:
    obj = instance()
    del obj["spec"]["sshPublicKey"]
    pod = render_pod(obj, facts())
    assert [x["name"] for x in pod["spec"]["containers"]] == ["main"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["workspace"]


def test_visibility_carries_mains_whole_card_count() -> None:
    obj = instance(resources={"accelerator": "3", "cpu": "24", "ram": "192Gi", "localStorage": "15Gi"})
    pod = render_pod(obj, facts())
    assert container(pod, "main")["resources"]["limits"]["nvidia.com/gpu"] == "3"
    assert container(pod, "sshd")["resources"]["limits"] == {"device.gpustack.ai/nvidia.visibility": "3"}


def test_a_card_less_instance_on_a_general_type_has_no_accelerator_keys() -> None:
    obj = instance(resources={"cpu": "2", "ram": "4Gi", "localStorage": "15Gi"})
    pod = render_pod(obj, facts(maker=None))
    assert container(pod, "main")["resources"]["limits"] == {
        "cpu": "2",
        "memory": "4Gi",
        "ephemeral-storage": "15Gi",
    }
    assert "resources" not in container(pod, "sshd")


def test_runtime_class_pull_secret_and_pinned_node() -> None:
    obj = instance(imagePullSecret={"name": "registry-team-a"}, nodeName="gpu-a10g-0")
    pod = render_pod(obj, facts(runtime_class="nvidia", hostname="gpu-a10g-0.example"))
    spec = pod["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "registry-team-a"}]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a10g-0.example"}
    assert "nodeName" not in spec


# --- Volumes --------------------------------------------------------------------------------------------


def test_ephemeral_workspace_is_an_empty_dir_with_its_size_limit() -> None:
    (workspace,) = [v for v in render_pod(instance(), facts())["spec"]["volumes"] if v["name"] == "workspace"]
    assert workspace == {"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}}


def test_persistent_workspace_is_the_claim_with_its_volumes_node_affinity() -> None:
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
        ]
    }
    obj = instance(volume={"persistent": {"name": "workspace-data"}})
    pod = render_pod(obj, facts(workspace_claim="workspace-data", node_affinity=selector))
    (workspace,) = [v for v in pod["spec"]["volumes"] if v["name"] == "workspace"]
    assert workspace == {"name": "workspace", "persistentVolumeClaim": {"claimName": "workspace-data"}}
    assert pod["spec"]["affinity"] == {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}
    }


def test_additional_volumes_are_mounted_in_main_only() -> None:
    obj = instance(
        additionalVolumes=[
            {"mountPath": "/data", "persistent": {"name": "datasets"}, "readOnly": True},
            {"mountPath": "/etc/app", "configMap": {"name": "app"}, "subPath": "conf"},
            {"mountPath": "/secrets", "secret": {"name": "tokens"}},
            {"mountPath": "/host", "hostPath": {"path": "/opt/models", "type": "Directory"}},
        ]
    )
    pod = render_pod(obj, facts())
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["additional-0"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert volumes["additional-1"]["configMap"] == {"name": "app"}
    assert volumes["additional-2"]["secret"] == {"secretName": "tokens"}
    assert volumes["additional-3"]["hostPath"] == {"path": "/opt/models", "type": "Directory"}
    assert container(pod, "main")["volumeMounts"][1:] == [
        {"name": "additional-0", "mountPath": "/data", "readOnly": True},
        {"name": "additional-1", "mountPath": "/etc/app", "subPath": "conf"},
        {"name": "additional-2", "mountPath": "/secrets"},
        {"name": "additional-3", "mountPath": "/host"},
    ]
    assert all(m["name"] == "sshd-authorized-keys" for m in container(pod, "sshd")["volumeMounts"])


def test_a_model_volume_is_not_rendered_silently() -> None:
    obj = instance(additionalVolumes=[{"mountPath": "/model", "model": {"artifactRef": {"name": "qwen"}}}])
    with pytest.raises(ValueError, match="/model"):
        render_pod(obj, facts())


def test_node_selectors_of_several_claims_are_anded() -> None:
    def term(key: str, value: str) -> dict:
        return {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}

    zone = {"nodeSelectorTerms": [term("zone", "a"), term("zone", "b")]}
    rack = {"nodeSelectorTerms": [term("rack", "r1")]}
    merged = merge_node_selectors([zone, None, rack])
    assert merged == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    *term("zone", "a")["matchExpressions"],
                    *term("rack", "r1")["matchExpressions"],
                ]
            },
            {
                "matchExpressions": [
                    *term("zone", "b")["matchExpressions"],
                    *term("rack", "r1")["matchExpressions"],
                ]
            },
        ]
    }
    assert merge_node_selectors([None, {}]) is None


# --- Resource keys (the table of A.7) ---------------------------------------------------------------------


def test_whole_slice_and_partition_keys() -> None:
    assert accelerator_request({"accelerator": "2"}, NVIDIA).keys == {"nvidia.com/gpu": "2"}
    sliced = accelerator_request(
        {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 20, "acceleratorSlicedCoresPercentage": 40},
        NVIDIA,
    )
    assert sliced.keys == {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": "20",
        "nvidia.com/gpu.sliced.cores-percentage": "40",
    }
    assert sliced.cards == 1
    partition = accelerator_request({"accelerator": "1", "acceleratorPartitionedProfile": "3g.40gb"}, NVIDIA)
    assert partition.keys == {
        "nvidia.com/gpu.partitioned": "1",
        "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
    }
    assert partition.cards == 1
    assert accelerator_request({"accelerator": "0"}, NVIDIA).keys == {}
    assert accelerator_request({"accelerator": "1"}, None).keys == {}


def test_thead_profiles_are_published_with_their_separator() -> None:
    request = accelerator_request(
        {"accelerator": "1", "acceleratorPartitionedProfile": "4g48gb"}, BY_NAME["thead"]
    )
    assert "alibabacloud.com/ppu.partitioned.mig-4g.48gb" in request.keys


def test_limits_equal_requests_on_accelerator_keys() -> None:
    main = container(render_pod(instance(), facts()), "main")
    for key in ("nvidia.com/gpu.sliced", "nvidia.com/gpu.sliced.memory-percentage"):
        assert main["resources"]["limits"][key] == main["resources"]["requests"][key]


def test_overcommit_example_from_the_spec() -> None:
    # 1C/4Gi unit, 2 accelerators, 64Gi storage -> 200m/256Mi/8Gi.
    limits = general_limits({"cpu": "2", "ram": "8Gi", "localStorage": "64Gi"})
    assert limits == {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "64Gi"}
    requests = general_requests(limits, accelerated=True, cards=2, overcommit=True)
    assert requests == {"cpu": "200m", "memory": "256Mi", "ephemeral-storage": "8Gi"}


def test_overcommit_off_requests_the_limits() -> None:
    limits = {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "64Gi"}
    assert general_requests(limits, accelerated=True, cards=2, overcommit=False) == limits


@pytest.mark.parametrize(
    ("cpu", "accelerated", "expected"),
    [("100m", True, "100m"), ("1500m", False, "1500m"), ("4", False, "3200m"), ("2500m", False, "2400m")],
)
def test_small_cpu_limits_request_themselves(cpu: str, accelerated: bool, expected: str) -> None:
    requests = general_requests({"cpu": cpu}, accelerated=accelerated, cards=1, overcommit=True)
    assert requests["cpu"] == expected


def test_general_unit_is_a_whole_core_rounded_up() -> None:
    requests = general_requests(
        {"cpu": "1500m", "memory": "8Gi"}, accelerated=False, cards=0, overcommit=True
    )
    assert requests == {"cpu": "1500m", "memory": "256Mi"}  # 2 units: 1600m capped at 1500m, 2 x 128Mi


def test_the_seed_instance_requests_under_overcommit() -> None:
    main = container(render_pod(instance(), facts()), "main")
    assert main["resources"]["limits"]["cpu"] == "1600m"
    assert main["resources"]["requests"]["cpu"] == "100m"
    assert main["resources"]["requests"]["memory"] == "128Mi"
    assert main["resources"]["requests"]["ephemeral-storage"] == "1920Mi"  # 15Gi / 8
