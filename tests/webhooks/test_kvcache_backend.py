"""KVCacheBackend admission, rules B1–B12 (kv-cache spec §3.1): each rule's accepted and refused example."""

from __future__ import annotations

import copy

import pytest

from tests.webhooks.kvcache_objects import backend, external, paths, run, setting
from webhooks.kvcache import backend as rules

MEMBERS = "spec.connection.managed.members"
LEADER = "spec.connection.managed.leader"


def group(**fields):
    base = {"nodeSelector": {"kubernetes.io/os": "linux"}, "medium": "DRAM", "capacityPerMember": "8Gi"}
    base.update(fields)
    return base


def with_members(*groups, **leader):
    obj = backend()
    obj["spec"]["connection"]["managed"]["members"] = list(groups)
    obj["spec"]["connection"]["managed"]["leader"].update(leader)
    return obj


def test_seed_backend_is_admitted() -> None:
    assert run(rules.validate, backend()).allowed


# B1
@pytest.mark.parametrize("connection", [{}, None])
def test_b1_neither_connection_is_refused(connection) -> None:
    obj = backend(connection=connection)
    decision = run(rules.validate, obj)
    assert not decision.allowed and "spec.connection" in paths(decision)
    assert "connection.managed" in decision.message and "connection.external" in decision.message


def test_b1_both_connections_are_refused() -> None:
    obj = backend()
    obj["spec"]["connection"]["external"] = external()["spec"]["connection"]["external"]
    decision = run(rules.validate, obj)
    assert paths(decision) == ["spec.connection"]


# B2
def test_b2_image_from_setting_is_admitted() -> None:
    assert run(rules.validate, backend(), cluster=[setting("kv-cache-backend-image", "img:1")]).allowed


def test_b2_no_image_and_cleared_setting_is_refused_on_create() -> None:
    decision = run(rules.validate, backend(), cluster=[setting("kv-cache-backend-image", " ")])
    assert paths(decision) == ["spec.image"]
    assert "kv-cache-backend-image" in decision.message


def test_b2_other_updates_pass_with_a_cleared_setting() -> None:
    old = backend()
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    new["spec"]["connection"]["managed"]["members"][0]["capacityPerMember"] = "16Gi"
    cleared = [setting("kv-cache-backend-image", "")]
    assert run(rules.validate, new, old=old, operation="UPDATE", cluster=cleared).allowed
    new["spec"]["image"] = ""
    old["spec"]["image"] = "img:1"
    assert not run(rules.validate, new, old=old, operation="UPDATE", cluster=cleared).allowed


# B3
def test_b3_replicas() -> None:
    assert run(rules.validate, with_members(group(), replicas=3)).allowed
    decision = run(rules.validate, with_members(group(), replicas=3, electionBackend="None"))
    assert paths(decision) == [f"{LEADER}.replicas"]
    assert paths(run(rules.validate, with_members(group(), replicas=6))) == [f"{LEADER}.replicas"]


# B4
def test_b4_multitenancy_off_while_claimed_is_refused() -> None:
    old = backend()
    new = copy.deepcopy(old)
    new["spec"]["connection"]["managed"]["leader"]["multiTenancy"] = False
    assert run(rules.validate, new, old=old, operation="UPDATE").allowed
    old["status"] = {"usedBy": [{"kind": "KVCachePool", "namespace": "", "name": "shared-dram"}]}
    decision = run(rules.validate, new, old=old, operation="UPDATE")
    assert paths(decision) == [f"{LEADER}.multiTenancy"]
    assert "KVCachePool shared-dram" in decision.message


# B5
def test_b5_external_endpoints() -> None:
    assert run(rules.validate, external()).allowed
    assert run(rules.validate, external(client="[::1]:50051")).allowed
    decision = run(rules.validate, external(client="mooncake.example"))
    assert paths(decision) == ["spec.connection.external.endpoints[0].address"]
    for bad in (" :50051", "host:port", "host:0", "host:70000"):
        assert not run(rules.validate, external(admin=bad)).allowed, bad
    missing = external()
    missing["spec"]["connection"]["external"]["endpoints"].pop(1)
    decision = run(rules.validate, missing)
    assert paths(decision) == ["spec.connection.external.endpoints"] and "Admin" in decision.message


# B6
@pytest.mark.parametrize(
    "arg",
    ["-default_kv_lease_ttl=15m", "--default_kv_lease_ttl=15m", "-metrics_host=::", "-eviction_ratio=0.1"],
)
def test_b6_allowed_leader_args(arg) -> None:
    assert run(rules.validate, with_members(group(), extraArgs=[arg])).allowed


@pytest.mark.parametrize(
    "arg",
    [
        "-enable_cxl=true",
        "-rpc_port=1",
        "--port=5",
        "-enable_multi_tenants=false",
        "-noenable_multi_tenants",
        "-snapshot_backup_dir=/x",
        "-enable_snapshot",
        "-flagfile=/etc/x",
        "-metrics_host=127.0.0.1",
        "not-a-flag",
        # the election's group, which the operator renders together or not at all
        "-enable_ha=true",
        "-ha_backend_connstring=x/y",
        "-cluster_id=shared",
        "-rpc_address=10.0.0.1",
        "-pod_name=x",
    ],
)
def test_b6_refused_leader_args(arg) -> None:
    decision = run(rules.validate, with_members(group(), extraArgs=[arg]))
    assert paths(decision) == [f"{LEADER}.extraArgs[0]"]


# B7
def test_b7_member_env_and_args() -> None:
    ok = group(extraEnv=[{"name": "MC_STORE_MEMCPY", "value": "1"}], extraArgs=["-tenant_id=x"])
    assert run(rules.validate, with_members(ok)).allowed
    decision = run(rules.validate, with_members(group(extraEnv=[{"name": "MC_TE_METRIC", "value": "0"}])))
    assert paths(decision) == [f"{MEMBERS}[0].extraEnv[0].name"]
    decision = run(rules.validate, with_members(group(extraArgs=["-global_segment_size=1"])))
    assert paths(decision) == [f"{MEMBERS}[0].extraArgs[0]"]
    for rendered in ("POD_NAME", "POD_NAMESPACE", "POD_IP"):  # the election's identity variables
        decision = run(rules.validate, with_members(group(), extraEnv=[{"name": rendered, "value": "x"}]))
        assert paths(decision) == [f"{LEADER}.extraEnv[0].name"]


def test_b7_visibility_variables_are_rendered_on_dram_only() -> None:
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert run(rules.validate, with_members(group(medium="VRAM", extraEnv=env))).allowed
    assert not run(rules.validate, with_members(group(extraEnv=env))).allowed


# B8
def test_b8_medium_is_immutable() -> None:
    old = with_members(group())
    new = with_members(group(capacityPerMember="16Gi"))
    assert run(rules.validate, new, old=old, operation="UPDATE").allowed
    new = with_members(group(medium="VRAM"))
    assert paths(run(rules.validate, new, old=old, operation="UPDATE")) == [f"{MEMBERS}[0].medium"]


# B9
A, B, C = (group(nodeSelector={"g": x}) for x in "abc")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([A, B], [A, B, C]),
        ([A, B, C], [A, B]),
        ([A, B, C], [A, C, C]),
        ([A, B], [group(nodeSelector={"g": "b2"}), A][:1]),
    ],
)
def test_b9_admitted_group_edits(before, after) -> None:
    assert run(rules.validate, with_members(*after), old=with_members(*before), operation="UPDATE").allowed


@pytest.mark.parametrize(("before", "after", "moved"), [([A, B, C], [B, A, C], 0), ([A, B, C], [A, C], 1)])
def test_b9_moved_groups_are_refused(before, after, moved) -> None:
    decision = run(rules.validate, with_members(*after), old=with_members(*before), operation="UPDATE")
    assert paths(decision)[0] == f"{MEMBERS}[{moved}]"
    assert "moved to" in decision.message


# B10, B11
def tier(**fields):
    base = {"path": "/mnt/kv", "capacity": "4Ti"}
    base.update(fields)
    return base


def test_b10_tier_capacity_may_change_but_not_be_added() -> None:
    old = with_members(group(localDisks=[tier()]))
    assert run(
        rules.validate, with_members(group(localDisks=[tier(capacity="2Ti")])), old=old, operation="UPDATE"
    ).allowed
    decision = run(
        rules.validate,
        with_members(group(localDisks=[tier()])),
        old=with_members(group()),
        operation="UPDATE",
    )
    assert paths(decision) == [f"{MEMBERS}[0].localDisks"]
    two = with_members(
        group(localDisks=[tier()]), group(nodeSelector={"x": "y"}, localDisks=[tier(path="/mnt/b")])
    )
    assert f"{MEMBERS}[1].localDisks" in paths(run(rules.validate, two))


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "relative",
        "/a/../b",
        "/dev/infiniband/x",
        " /mnt",
        ".",
        "/.",
        "/./",
        "/mnt/./kv",
        "/mnt/kv/.",
        "./kv",
    ],
)
def test_b10_tier_paths(path) -> None:
    decision = run(rules.validate, with_members(group(localDisks=[tier(path=path)])))
    assert paths(decision) == [f"{MEMBERS}[0].localDisks[0].path"], decision.message


@pytest.mark.parametrize(
    "path", ["/mnt/kv", "/var/lib/kvcache/", "/mnt/kv.d", "/mnt/.kv", "/dev/infiniband-cache"]
)
def test_b10_tier_paths_admitted(path) -> None:
    assert run(rules.validate, with_members(group(localDisks=[tier(path=path)]))).allowed


def test_b10_a_dot_segment_is_refused_saying_why() -> None:
    decision = run(rules.validate, with_members(group(localDisks=[tier(path="/.")])))
    assert "." in decision.message and "write the directory" in decision.message


def test_b11_eviction() -> None:
    good = tier(eviction={"enabled": True, "watermark": {"high": 90, "low": 80}})
    assert run(rules.validate, with_members(group(localDisks=[good]))).allowed
    equal = tier(eviction={"watermark": {"high": 80, "low": 80}})
    assert paths(run(rules.validate, with_members(group(localDisks=[equal])))) == [
        f"{MEMBERS}[0].localDisks[0].eviction.watermark.low"
    ]
    off = tier(eviction={"enabled": False, "policy": "LRU"})
    assert not run(rules.validate, with_members(group(localDisks=[off]))).allowed
    uncapped = {"path": "/mnt/kv", "eviction": {"watermark": {"high": 90, "low": 80}}}
    assert not run(rules.validate, with_members(group(localDisks=[uncapped]))).allowed


def test_b11_bucket_floors() -> None:
    at_floor = group(capacityPerMember="64Mi", localDisks=[tier(capacity="64Mi", keyLimit=512)])
    assert run(rules.validate, with_members(at_floor)).allowed
    below = group(capacityPerMember="63Mi", localDisks=[tier(capacity="32Mi", keyLimit=511)])
    decision = run(rules.validate, with_members(below))
    assert set(paths(decision)) == {
        f"{MEMBERS}[0].capacityPerMember",
        f"{MEMBERS}[0].localDisks[0].capacity",
        f"{MEMBERS}[0].localDisks[0].keyLimit",
    }
    assert "64Mi bucket" in decision.message and "512 keys" in decision.message
    assert run(rules.validate, with_members(group(capacityPerMember="32Mi"))).allowed  # no tier, no floor


# B12
def test_b12_host_paths_and_fabric_count_warning() -> None:
    ok = group(hostPaths=[{"path": "/usr/local/Ascend/driver", "mountPath": "/usr/local/Ascend/driver"}])
    assert run(rules.validate, with_members(ok)).allowed
    ib = group(hostPaths=[{"path": "/dev/infiniband", "mountPath": "/dev/infiniband"}])
    assert paths(run(rules.validate, with_members(ib))) == [f"{MEMBERS}[0].hostPaths[0].mountPath"]
    dup = group(hostPaths=[{"path": "/a", "mountPath": "/m"}, {"path": "/b", "mountPath": "/m/"}])
    assert paths(run(rules.validate, with_members(dup))) == [f"{MEMBERS}[0].hostPaths[1].mountPath"]
    decision = run(rules.validate, with_members(group(fabricInterfaceCount=2)))
    assert decision.allowed and decision.warnings and "fabricInterfaceCount" in decision.warnings[0]
    rdma = group(fabricInterfaceCount=2, transport={"protocol": "RDMA"})
    assert not run(rules.validate, with_members(rdma)).warnings


def test_wrong_types_are_refusals_not_errors() -> None:
    obj = backend(connection={"managed": {"leader": "x", "members": "y"}})
    decision = run(rules.validate, obj)
    assert not decision.allowed and decision.code == 422
    obj = with_members(group(), replicas="three", extraArgs=[1, None])
    assert not run(rules.validate, obj).allowed
