"""Backend, pool and binding status derivations (kv-cache spec §6), from what a master answered."""

from __future__ import annotations

from controllers.kvcache import admin, backend_status, pool_status, quota
from controllers.kvcache.backend_status import Observation
from tests.webhooks.kvcache_objects import backend, binding, external, pool

MiB = 1 << 20
STAMP = "2026-12-01T00:00:00Z"
ENDPOINTS = [{"name": "Client", "address": "c:1"}, {"name": "Admin", "address": "a:2"}]


def metrics(**values):
    return admin.Metrics({k: float(v) for k, v in values.items()}, {})


def segment(host="10.0.0.5", used=0):
    return admin.Segment("seg-1", "cli-1", f"{host}:12345", f"{host}:15600", "tcp", "OK", used, 64 * MiB)


def member_pod(name="m-1", ip="10.0.0.5", node="node-a", ready=True, waiting=None):
    status = {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if waiting:
        status["containerStatuses"] = [{"state": {"waiting": {"reason": waiting, "message": "boom"}}}]
    return {
        "metadata": {
            "name": name,
            "labels": {"kvcache.gpustack.ai/group": "0", "kvcache.gpustack.ai/component": "member"},
        },
        "spec": {"nodeName": node},
        "status": status,
    }


def conditions(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def healthy(**overrides):
    seen = Observation(
        health=admin.Health(True, "leader"),
        metrics=metrics(
            master_total_capacity_bytes=64 * MiB, master_allocated_bytes=MiB, master_put_end_requests_total=3
        ),
        segments=[segment()],
    )
    for key, value in overrides.items():
        setattr(seen, key, value)
    return seen


def test_ready_backend() -> None:
    status = backend_status.derive(
        backend(), healthy(), endpoints=ENDPOINTS, pods=[member_pod()], stamp=STAMP
    )
    assert status["phase"] == "Ready" and status["phaseMessage"] == ""
    assert status["capacity"] == {"total": "64Mi", "used": "1Mi"}
    assert status["members"] == [
        {
            "segmentID": "seg-1",
            "clientID": "cli-1",
            "segmentName": "10.0.0.5:12345",
            "protocol": "tcp",
            "state": "OK",
            "nodeName": "node-a",
            "medium": "DRAM",
        }
    ]
    found = conditions(status)
    assert found["LeaderAvailable"][0] == "True" and found["MembersMounted"][0] == "True"
    assert (
        found["CapacityObserved"][0] == "True"
        and found["PoolWrites"][0] == "True"
        and found["Deletable"][0] == "True"
    )


def test_capacity_is_withheld_until_service_ready() -> None:
    seen = healthy(health=admin.Health(False, "leader"), metrics=metrics(master_total_capacity_bytes=0))
    status = backend_status.derive(backend(), seen, endpoints=ENDPOINTS, pods=[], stamp=STAMP)
    assert "capacity" not in status and status["phase"] == "Provisioning"
    assert conditions(status)["CapacityObserved"][0] == "False"


def test_failed_listing_keeps_members_and_404_is_unknown() -> None:
    old = backend()
    old["status"] = {"members": [{"segmentID": "old", "clientID": "c", "segmentName": "n"}]}
    failed = healthy(segments=None, segments_error=admin.AdminError(admin.REFUSED, "500", status=500))
    status = backend_status.derive(old, failed, endpoints=ENDPOINTS, pods=[], stamp=STAMP)
    assert status["members"] == old["status"]["members"] and conditions(status)["MembersMounted"] == (
        "False",
        "ListingFailed",
    )
    assert status["phase"] == "Degraded"
    absent = healthy(segments=None, segments_error=admin.AdminError(admin.REFUSED, "404", status=404))
    status = backend_status.derive(old, absent, endpoints=ENDPOINTS, pods=[], stamp=STAMP)
    assert (
        conditions(status)["MembersMounted"] == ("Unknown", "SegmentListingNotServed")
        and status["phase"] == "Ready"
    )


def test_failed_capacity_scrape_clears_capacity() -> None:
    old = backend()
    old["status"] = {"capacity": {"total": "64Mi"}}
    seen = healthy(metrics=None, metrics_error=admin.AdminError(admin.GARBAGE, "junk"))
    status = backend_status.derive(old, seen, endpoints=ENDPOINTS, pods=[], stamp=STAMP)
    assert "capacity" not in status and status["phase"] == "Error"


def test_external_unreachable_is_error_managed_is_provisioning() -> None:
    down = Observation(health_error=admin.AdminError(admin.UNREACHABLE, "refused"))
    assert (
        backend_status.derive(external(), down, endpoints=ENDPOINTS, pods=[], stamp=STAMP)["phase"] == "Error"
    )
    assert (
        backend_status.derive(backend(), down, endpoints=ENDPOINTS, pods=[], stamp=STAMP)["phase"]
        == "Provisioning"
    )
    redirected = Observation(health_error=admin.AdminError(admin.REDIRECTED, "302"))
    assert (
        backend_status.derive(backend(), redirected, endpoints=ENDPOINTS, pods=[], stamp=STAMP)["phase"]
        == "Error"
    )


def test_degraded_cases() -> None:
    stuck = member_pod("m-2", ip="10.0.0.6", ready=False, waiting="CrashLoopBackOff")
    status = backend_status.derive(
        backend(), healthy(), endpoints=ENDPOINTS, pods=[member_pod(), stuck], stamp=STAMP
    )
    assert (
        status["phase"] == "Degraded"
        and "m-2" in status["phaseMessage"]
        and "CrashLoopBackOff" in status["phaseMessage"]
    )
    pulling = member_pod("m-3", ip="", ready=False, waiting="ContainerCreating")
    assert (
        backend_status.derive(
            backend(), healthy(), endpoints=ENDPOINTS, pods=[member_pod(), pulling], stamp=STAMP
        )["phase"]
        == "Ready"
    )
    empty = healthy(metrics=metrics(master_total_capacity_bytes=0), segments=[])
    status = backend_status.derive(backend(), empty, endpoints=ENDPOINTS, pods=[], stamp=STAMP)
    assert status["phase"] == "Degraded" and "NoSegments" in status["phaseMessage"]
    twins = [member_pod("a", node="n1"), member_pod("b", node="n2")]
    status = backend_status.derive(backend(), healthy(), endpoints=ENDPOINTS, pods=twins, stamp=STAMP)
    assert conditions(status)["MembersMounted"] == ("False", "AmbiguousMemberIdentity")
    assert "nodeName" not in status["members"][0] and status["members"][0]["medium"] == "DRAM"


def test_transition_time_holds_while_status_holds() -> None:
    first = backend_status.derive(
        backend(), healthy(), endpoints=ENDPOINTS, pods=[], stamp="2026-01-01T00:00:00Z"
    )
    obj = backend()
    obj["status"] = first
    again = backend_status.derive(obj, healthy(), endpoints=ENDPOINTS, pods=[], stamp="2026-02-02T00:00:00Z")
    assert again["conditions"] == first["conditions"]


def test_deleting_names_the_claimant() -> None:
    obj = backend()
    obj["metadata"]["deletionTimestamp"] = STAMP
    obj["status"] = {"usedBy": [{"kind": "KVCachePool", "namespace": "", "name": "shared-dram"}]}
    status = backend_status.derive(obj, healthy(), endpoints=ENDPOINTS, pods=[], stamp=STAMP)
    assert status["phase"] == "Deleting" and "KVCachePool shared-dram" in status["phaseMessage"]
    assert conditions(status)["Deletable"][0] == "False"


# --- quota, bindings, pools -----------------------------------------------------------------------------
def aged(obj, stamp):
    obj["metadata"]["creationTimestamp"] = stamp
    return obj


def test_holders_and_policy_document() -> None:
    a = aged(binding("a", "team-a", domain_name="qwen", ceiling="4Gi"), "2026-01-01T00:00:00Z")
    b = aged(binding("b", "team-b", domain_name="qwen", ceiling="8Gi"), "2026-01-02T00:00:00Z")
    c = aged(binding("c", "team-c", domain_name="llama", ceiling="1Gi"), "2026-01-03T00:00:00Z")
    assert quota.holders([b, c, a]) == {"qwen": ("team-a", "a"), "llama": ("team-c", "c")}
    assert quota.policy_document([b, c, a]) == (
        'version: 1\ntenants:\n  - name: "llama"\n    quota: 1073741824\n  - name: "qwen"\n    quota: 4294967296\n'
    )
    assert quota.policy_document([]) == "version: 1\ntenants: []\n"
    assert quota.policy_document([binding(ceiling="lots")]) is None


def snapshot(requested=4 * MiB, effective=4 * MiB, charged=0, over=False, closed=False):
    return admin.TenantQuota("default", requested, effective, charged, closed, over, True)


def test_binding_figures_are_absent_until_observed_and_zero_grant_is_false() -> None:
    obj = binding()
    key = ("team-a", "qwen-cache")
    unread = quota.binding_status(obj, key, quota.Ledger(quota.UNREACHABLE, "refused"), "b", STAMP)
    assert not {"requestedQuota", "effectiveQuota", "usage", "overQuota"} & set(unread)
    assert unread["phase"] == "Error" and conditions(unread)["QuotaObserved"] == (
        "False",
        "LedgerUnreachable",
    )
    zero = quota.binding_status(
        obj, key, quota.Ledger(quota.AVAILABLE, snapshots={"default": snapshot(effective=0)}), "b", STAMP
    )
    assert (
        zero["effectiveQuota"] == "0"
        and conditions(zero)["QuotaGranted"][0] == "False"
        and zero["phase"] == "Error"
    )
    granted = quota.binding_status(
        obj, key, quota.Ledger(quota.AVAILABLE, snapshots={"default": snapshot(charged=MiB)}), "b", STAMP
    )
    assert (granted["requestedQuota"], granted["effectiveQuota"], granted["usage"], granted["overQuota"]) == (
        "4Mi",
        "4Mi",
        "1Mi",
        False,
    )
    assert granted["phase"] == "Ready" and "charged_bytes" in next(
        c["message"] for c in granted["conditions"] if c["type"] == "QuotaObserved"
    )
    off = quota.binding_status(obj, key, quota.Ledger(quota.DISABLED), "b", STAMP)
    assert conditions(off)["QuotaGranted"] == ("True", "Unenforced") and "effectiveQuota" not in off
    elsewhere = quota.binding_status(
        obj, ("team-b", "x"), quota.Ledger(quota.AVAILABLE, snapshots={"default": snapshot()}), "b", STAMP
    )
    assert conditions(elsewhere)["DomainExclusive"][0] == "False" and "effectiveQuota" not in elsewhere


def test_pool_status() -> None:
    p = pool(total="8Gi")
    bindings = [
        binding("a", "team-a", domain_name="qwen", ceiling="6Gi"),
        binding("b", "team-b", domain_name="llama", ceiling="4Gi"),
    ]
    ledger = quota.Ledger(
        quota.AVAILABLE,
        snapshots={"qwen": snapshot(charged=MiB), "llama": snapshot(charged=2 * MiB)},
        allocatable=64 * MiB,
    )
    status = pool_status.derive(p, backend(), "c:1", bindings, ledger, STAMP)
    assert (
        status["phase"] == "Ready"
        and status["clientEndpoint"] == "c:1"
        and status["usage"] == {"total": "3Mi"}
    )
    found = conditions(status)
    assert found["QuotaWithinTotal"] == ("False", "Oversubscribed")
    assert "10Gi" in next(c["message"] for c in status["conditions"] if c["type"] == "QuotaWithinTotal")
    assert [d["name"] for d in status["domains"]] == ["llama", "qwen"]
    assert status["domains"][1] == {
        "name": "qwen",
        "binding": {"namespace": "team-a", "name": "a"},
        "dtype": "bfloat16",
        "blockSize": 64,
    }
    assert status["usedBy"] == [
        {"kind": "KVCachePoolBinding", "namespace": "team-a", "name": "a"},
        {"kind": "KVCachePoolBinding", "namespace": "team-b", "name": "b"},
    ]
    nothing = quota.Ledger(quota.AVAILABLE, allocatable=0)
    assert pool_status.derive(p, backend(), "c:1", [], nothing, STAMP)["phase"] == "Error"
    unreachable = pool_status.derive(
        p, backend(), "c:1", [], quota.Ledger(quota.UNREACHABLE, "refused"), STAMP
    )
    assert unreachable["phase"] == "Error" and "usage" not in unreachable
    assert conditions(unreachable)["QuotaLedgerAvailable"] == ("False", "LedgerUnreachable")
    single = pool_status.derive(p, backend(), "c:1", [], quota.Ledger(quota.DISABLED), STAMP)
    assert conditions(single)["QuotaLedgerAvailable"] == ("False", "MultiTenancyDisabled")
    assert pool_status.derive(p, None, "", [], None, STAMP)["phase"] == "Error"
    assert pool_status.derive(p, backend(), "", [], ledger, STAMP)["phase"] == "Provisioning"
    stuck = quota.Ledger(quota.AVAILABLE, allocatable=MiB, writable=False, write_error="PERSISTENT_FAIL")
    assert (
        conditions(pool_status.derive(p, backend(), "c:1", [], stuck, STAMP))["QuotaPolicyWritable"][0]
        == "False"
    )
