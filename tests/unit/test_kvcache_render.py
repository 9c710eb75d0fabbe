"""What a managed KVCacheBackend renders (kv-cache spec §5.1): leader, Service, members."""

from __future__ import annotations

import copy

from controllers.kvcache import backend_render as br
from controllers.kvcache import leader_render as lr
from controllers.kvcache import members_render as mr
from tests.webhooks.kvcache_objects import backend

NS = "gpustack-system"
IMAGE = "gpustack/mirrored-mooncake:0.3.13.post1-cpu"


def group(**fields):
    base = {"nodeSelector": {"kubernetes.io/os": "linux"}, "medium": "DRAM", "capacityPerMember": "8Gi"}
    base.update(fields)
    return base


def managed(*groups, **leader):
    obj = backend()
    if groups:
        obj["spec"]["connection"]["managed"]["members"] = list(groups)
    obj["spec"]["connection"]["managed"]["leader"].update(leader)
    return obj


def env(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_leader_service_and_endpoints() -> None:
    service = br.leader_service(managed(), NS)
    assert service["metadata"]["name"] == "mooncake-dram-leader"
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("client", 50051), ("admin", 9003)]
    assert service["metadata"]["annotations"] == {"kvcache.gpustack.ai/backend": "mooncake-dram"}
    assert br.client_address("mooncake-dram", NS) == "mooncake-dram-leader.gpustack-system.svc:50051"
    assert br.admin_address("mooncake-dram", NS) == "mooncake-dram-leader.gpustack-system.svc:9003"


def test_leader_deployment() -> None:
    deployment = lr.leader_deployment(
        managed(extraArgs=["-default_kv_lease_ttl=15m"], electionBackend="None"), NS, IMAGE
    )
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    leader = spec["template"]["spec"]["containers"][0]
    assert leader["image"] == IMAGE and leader["imagePullPolicy"] == "IfNotPresent"
    assert leader["command"] == ["mooncake_master"]
    assert leader["args"] == [
        "-rpc_port=50051",
        "-metrics_port=9003",
        "-default_kv_lease_ttl=5m",
        "-allocation_strategy=free_ratio_first",
        "-enable_multi_tenants=true",
        "-tenant_quota_connector_type=file",
        "-tenant_quota_connector_uri=/var/lib/mooncake/policy/tenant_quotas.yaml",
        "-default_kv_lease_ttl=15m",
    ]
    assert leader["readinessProbe"]["httpGet"] == {"path": "/get_all_segments", "port": 9003}
    assert leader["livenessProbe"]["httpGet"] == {"path": "/health", "port": 9003}
    pod = spec["template"]["spec"]
    seed = next(v for v in pod["volumes"] if v["name"] == "quota-policy-seed")
    assert seed["configMap"] == {"name": "mooncake-dram-quota-policy", "optional": True}
    assert "tenants: []" in pod["initContainers"][0]["command"][2]
    assert "serviceAccountName" not in pod and leader["env"] == []  # no election: no identity, no account


def test_leader_variants() -> None:
    single = lr.leader_args(managed(multiTenancy=False, allocationStrategy="Random"), NS)
    assert not [a for a in single if "multi_tenants" in a or "tenant_quota" in a]
    assert "-allocation_strategy=random" in single
    tiered = managed(group(localDisks=[{"path": "/mnt/kv", "capacity": "4Ti"}]))
    assert {"-enable_offload=true", "-offload_on_evict=true"} <= set(lr.leader_args(tiered, NS))
    assert not [a for a in lr.leader_args(managed(), NS) if "offload" in a]
    ha = lr.leader_deployment(managed(replicas=3), NS, IMAGE)["spec"]
    assert ha["replicas"] == 3 and ha["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 3},
    }
    assert (
        lr.leader_deployment(managed(replicas=3, electionBackend="None"), NS, IMAGE)["spec"]["replicas"] == 1
    )


def test_image_and_pull_policy() -> None:
    obj = managed()
    assert br.image_of(obj, "setting:1") == "setting:1"
    obj["spec"]["image"] = "mine:latest"
    assert br.image_of(obj, "setting:1") == "mine:latest" and br.pull_policy(obj, "mine:latest") == "Always"
    assert br.image_of(obj, "s", {"image": "group:2"}) == "group:2"
    assert br.pull_policy(obj, "registry:5000/repo") == "Always"
    assert br.pull_policy(obj, "registry:5000/repo:1") == "IfNotPresent"
    obj["spec"]["imagePullPolicy"] = "Never"
    assert br.pull_policy(obj, "mine:latest") == "Never"


def test_member_daemonset() -> None:
    (ds,) = mr.member_daemonsets(managed(group(extraArgs=["-tenant_id=x"])), NS, IMAGE)
    assert ds["metadata"]["name"] == "mooncake-dram-members-0"
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    pod = ds["spec"]["template"]["spec"]
    member = pod["containers"][0]
    assert member["command"] == ["mc_store_rest_server"]
    assert member["args"] == ["--port", "8080", "-D", "tenant_id=x"]
    values = env(member)
    assert "MOONCAKE_TE_META_DATA_SERVER" in values and "MOONCAKE_TE_METADATA_SERVER" not in values
    assert values["MOONCAKE_TE_META_DATA_SERVER"] == "P2PHANDSHAKE"
    assert "MOONCAKE_DEVICE" not in values
    assert values["MOONCAKE_MASTER"] == "mooncake-dram-leader.gpustack-system.svc:50051"
    assert values["MOONCAKE_LOCAL_HOSTNAME"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert values["MOONCAKE_PROTOCOL"] == "tcp" and values["MC_TE_METRIC"] == "1"
    assert values["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == str(8 << 30)
    assert values["MOONCAKE_LOCAL_BUFFER_SIZE"] == str(1 << 30)
    assert values["NVIDIA_VISIBLE_DEVICES"] == "void" and values["ASCEND_RT_VISIBLE_DEVICES"] == "void"
    assert member["resources"] == {"requests": {"memory": "9Gi"}}
    assert member["readinessProbe"]["tcpSocket"] == {"port": 8080}
    assert [p["containerPort"] for p in member["ports"]] == [8080]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"} and "hostNetwork" not in pod


def test_vram_and_fabric_groups() -> None:
    vram = group(
        medium="VRAM",
        localBufferSize="512Mi",
        transport={"protocol": "RDMA"},
        securityContext={"capabilities": {"add": ["SYS_ADMIN", "IPC_LOCK"]}},
    )
    efa = group(nodeSelector={"efa": "yes"}, transport={"protocol": "EFA"}, fabricInterfaceCount=4)
    rdma2 = group(nodeSelector={"r": "2"}, transport={"protocol": "RDMA"}, fabricInterfaceCount=2)
    first, second, third = mr.member_daemonsets(managed(vram, efa, rdma2), NS, IMAGE)
    member = first["spec"]["template"]["spec"]["containers"][0]
    assert member["resources"] == {
        "requests": {"memory": "512Mi", "device.gpustack.ai/rdma.shared": "1"},
        "limits": {"device.gpustack.ai/rdma.shared": "1"},
    }
    assert "NVIDIA_VISIBLE_DEVICES" not in env(member)
    assert member["securityContext"]["capabilities"]["add"] == ["IPC_LOCK", "SYS_RESOURCE", "SYS_ADMIN"]
    assert first["spec"]["template"]["spec"]["hostNetwork"] is True
    assert second["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "vpc.amazonaws.com/efa": "4"
    }
    assert second["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["--port", "8081"]
    assert third["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "device.gpustack.ai/rdma": "2"
    }
    assert not any(
        "infiniband" in str(v)
        for ds in (first, second, third)
        for v in ds["spec"]["template"]["spec"].get("volumes", [])
    )


def test_fingerprint_ignores_the_node_selector() -> None:
    before = mr.member_daemonsets(managed(group()), NS, IMAGE)[0]
    wider = mr.member_daemonsets(managed(group(nodeSelector={})), NS, IMAGE)[0]
    bigger = mr.member_daemonsets(managed(group(capacityPerMember="16Gi")), NS, IMAGE)[0]

    def stamp(ds):
        return ds["spec"]["template"]["metadata"]["annotations"]["kvcache.gpustack.ai/pod-spec-hash"]

    assert stamp(before) == stamp(wider) != stamp(bigger)
    pod = {
        "metadata": {
            "name": "m",
            "labels": {"kvcache.gpustack.ai/group": "0"},
            "annotations": {"kvcache.gpustack.ai/pod-spec-hash": stamp(before)},
        }
    }
    assert mr.stale_members([wider], [pod]) == []
    assert mr.stale_members([bigger], [pod]) == [pod]
    gone = copy.deepcopy(pod)
    gone["metadata"]["deletionTimestamp"] = "x"
    assert mr.stale_members([bigger], [gone]) == []


def test_ownership() -> None:
    assert br.owned_by(br.leader_service(managed(), NS), "mooncake-dram")
    assert not br.owned_by({"metadata": {"name": "mooncake-dram-leader"}}, "mooncake-dram")


def test_only_host_fabrics_take_privileges_and_devices() -> None:
    """§5.1 step 6: RDMA and EFA take the host network, IPC_LOCK + SYS_RESOURCE and a device; every
    other protocol takes none of them, and an unset interface count renders as a written 1."""
    for protocol in ("Auto", "TCP", "CANN", "ROCM", "MUSA", "MACA"):
        (ds,) = mr.member_daemonsets(managed(group(transport={"protocol": protocol})), NS, IMAGE)
        pod = ds["spec"]["template"]["spec"]
        member = pod["containers"][0]
        assert "hostNetwork" not in pod and "securityContext" not in member, protocol
        assert set(member["resources"]["requests"]) == {"memory"} and "limits" not in member["resources"]
    backend_wide = managed(group(), group(nodeSelector={"tcp": "1"}, transport={"protocol": "TCP"}))
    backend_wide["spec"]["transport"] = {"protocol": "RDMA"}
    rdma, tcp = mr.member_daemonsets(backend_wide, NS, IMAGE)  # a group's own protocol wins
    assert rdma["spec"]["template"]["spec"]["hostNetwork"] is True
    assert "hostNetwork" not in tcp["spec"]["template"]["spec"]
    assert env(tcp["spec"]["template"]["spec"]["containers"][0])["MOONCAKE_PROTOCOL"] == "tcp"
    unset = mr.member_daemonsets(managed(group(transport={"protocol": "RDMA"})), NS, IMAGE)[0]
    one = mr.member_daemonsets(
        managed(group(transport={"protocol": "RDMA"}, fabricInterfaceCount=1)), NS, IMAGE
    )[0]
    assert unset["spec"]["template"] == one["spec"]["template"]
    privileged = group(transport={"protocol": "EFA"}, securityContext={"privileged": True})
    (ds,) = mr.member_daemonsets(managed(privileged), NS, IMAGE)
    context = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert context == {"capabilities": {"add": ["IPC_LOCK", "SYS_RESOURCE"]}, "privileged": True}
