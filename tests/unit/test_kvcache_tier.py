"""The disk tier of a member group (kv-cache spec §5.1 steps 7 and 9, §6.1 TierWasEmpty): what the
member renders, the survey and cleanup scripts run by a real ``sh``, the survey ledger, and the
cleanup's decisions."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from api import kvcache as kv
from controllers.kvcache import leader_render as lr
from controllers.kvcache import members_render as mr
from controllers.kvcache import tier_cleanup as tc
from controllers.kvcache import tier_render as tr
from controllers.kvcache import tier_status as ts
from tests.webhooks.kvcache_objects import backend

NS = "gpustack-system"
IMAGE = "gpustack/mirrored-mooncake:0.3.13.post1-cpu"
TIER = {
    "path": "/var/lib/kvcache",
    "capacity": "4Ti",
    "keyLimit": 10000000,
    "eviction": {"enabled": True, "policy": "LRU", "watermark": {"high": 90, "low": 80}},
}


def tiered(tier=None, grace=None, **group):
    obj = backend()
    members = obj["spec"]["connection"]["managed"]["members"]
    members.append(
        {"nodeSelector": {"kvcache": "true"}, "medium": "DRAM", "capacityPerMember": "500Gi", **group}
    )
    members[1]["localDisks"] = [copy.deepcopy(tier or TIER)]
    if grace is not None:
        obj["spec"]["connection"]["managed"]["scaleIn"] = {"gracePeriodSeconds": grace}
    return obj


def pod_spec(obj, index=1):
    return mr.member_daemonsets(obj, NS, IMAGE)[index]["spec"]["template"]["spec"]


def test_the_documented_tier_renders_the_store_variables() -> None:
    member = pod_spec(tiered())["containers"][0]
    offload = [(e["name"], e["value"]) for e in member["env"] if e["name"].startswith("MOONCAKE_OFFLOAD_")]
    assert offload == [
        ("MOONCAKE_OFFLOAD_ENABLED", "true"),
        ("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "/var/lib/kvcache"),
        ("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", str(64 << 20)),
        ("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "512"),
        ("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", str(4 << 40)),
        ("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", str(4 << 40)),
        ("MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", "10000000"),
        ("MOONCAKE_OFFLOAD_ENABLE_EVICTION", "true"),
        ("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "lru"),  # the store's spelling; "LRU" means never
        ("MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION", "true"),
        ("MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO", "0.9"),
        ("MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO", "0.8"),
    ]


def test_tier_variants() -> None:
    off = tr.tier_env({"path": "/t", "eviction": {"enabled": False}})
    assert [(e["name"], e["value"]) for e in off][-1] == ("MOONCAKE_OFFLOAD_ENABLE_EVICTION", "false")
    assert not [e for e in off if "TOTAL" in e["name"] or "POLICY" in e["name"]]  # the store's own ceilings
    bare = {e["name"] for e in tr.tier_env({"path": "/t"})}
    assert bare == {
        "MOONCAKE_OFFLOAD_ENABLED",
        "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
        "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES",
        "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT",
    }
    fifo = tr.tier_env(
        {"path": "/t", "capacity": "1Ti", "eviction": {"policy": "FIFO", "watermark": {"high": 95, "low": 7}}}
    )
    values = {e["name"]: e["value"] for e in fifo}
    assert values["MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY"] == "fifo"
    assert (
        values["MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO"],
        values["MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO"],
    ) == ("0.95", "0.07")


def test_the_member_pod_of_a_tier_group() -> None:
    obj = tiered(grace=30)
    spec = pod_spec(obj)
    member = spec["containers"][0]
    assert {"name": "tier", "hostPath": {"path": "/var/lib/kvcache", "type": "Directory"}} in spec["volumes"]
    assert {"name": "tier", "mountPath": "/var/lib/kvcache"} in member["volumeMounts"]
    (survey,) = spec["initContainers"]
    assert survey["name"] == "tier-survey" and survey["command"][:2] == ["sh", "-c"]
    assert survey["volumeMounts"] == [{"name": "tier", "mountPath": "/tier", "readOnly": True}]
    assert survey["image"] == IMAGE and survey["terminationMessagePath"] == "/dev/termination-log"
    hook = member["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[0] == "python3" and hook[-2:] == ["8081", "30"]  # group 1's port, the grace
    assert spec["terminationGracePeriodSeconds"] == 90
    untiered = pod_spec(obj, 0)
    assert "initContainers" not in untiered and "lifecycle" not in untiered["containers"][0]
    assert "terminationGracePeriodSeconds" not in untiered
    # Editing what the tier may hold re-renders (and so restarts) the tier group only.
    bigger = tiered(dict(TIER, capacity="8Ti"), grace=30)
    hashes = [
        ds["spec"]["template"]["metadata"]["annotations"][kv.ANNOTATION_POD_SPEC_HASH]
        for ds in (mr.member_daemonsets(obj, NS, IMAGE) + mr.member_daemonsets(bigger, NS, IMAGE))
    ]
    assert hashes[0] == hashes[2] and hashes[1] != hashes[3]
    assert {"-enable_offload=true", "-offload_on_evict=true"} <= set(lr.leader_args(obj, NS))


@pytest.fixture
def sh():
    found = shutil.which("sh")
    if found is None:
        pytest.skip("no sh on this machine")
    return found


def survey(sh, directory: Path, out: Path) -> subprocess.CompletedProcess:
    command = tr.survey_container(IMAGE, "IfNotPresent")["command"]
    argv = [sh, *command[1:4], str(directory), str(out)]  # the rendered script, this machine's paths
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_the_survey_script(sh, tmp_path: Path) -> None:
    tier, out = tmp_path / "tier", tmp_path / "message"
    tier.mkdir()
    assert survey(sh, tier, out).returncode == 0 and out.read_text() == "entries=0\n"
    (tier / "7357055856641.bucket").write_bytes(b"x")
    (tier / ".hidden").write_text("x")
    (tier / "with space").mkdir()
    assert survey(sh, tier, out).returncode == 0 and out.read_text() == "entries=3\n"
    missing = survey(sh, tmp_path / "absent", out)
    assert missing.returncode == 0 and out.read_text().startswith(
        "unreadable: "
    )  # never "empty", never fatal
    pod = {
        "status": {
            "initContainerStatuses": [
                {"name": "tier-survey", "state": {"terminated": {"exitCode": 0, "message": out.read_text()}}}
            ]
        }
    }
    assert ts.reading(pod) is None


def test_the_cleanup_script_empties_but_keeps_the_directory(sh, tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    (tier / "nested" / "deeper").mkdir(parents=True)
    for name in ("a.bucket", ".meta", "..odd", "-rf", "with space"):
        (tier / name).write_text("x")
    outside = tmp_path / "keep"
    outside.write_text("x")
    (tier / "link").symlink_to(outside)
    command = tr.cleanup_pod(tiered(), NS, "node-a", TIER, IMAGE)["spec"]["containers"][0]["command"]
    done = subprocess.run([sh, *command[1:4], str(tier)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert tier.is_dir() and os.listdir(tier) == [] and outside.read_text() == "x"


def test_the_cleanup_pod() -> None:
    pod = tr.cleanup_pod(tiered(), NS, "node-a", TIER, "img:1")
    assert pod["metadata"]["name"] == tr.cleanup_pod_name("mooncake-dram", "node-a")
    assert pod["metadata"]["annotations"] == {
        kv.ANNOTATION_OWNED_BY_BACKEND: "mooncake-dram",
        kv.ANNOTATION_NODE: "node-a",
    }
    spec = pod["spec"]
    assert spec["nodeName"] == "node-a" and spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["volumes"] == [
        {"name": "tier", "hostPath": {"path": "/var/lib/kvcache", "type": "Directory"}}
    ]
    (clean,) = spec["containers"]
    assert clean["image"] == "img:1" and clean["securityContext"] == {"runAsUser": 0}


def member(uid, node, created, message=None, group="1"):
    pod = {
        "metadata": {
            "name": f"m-{uid}",
            "uid": uid,
            "creationTimestamp": created,
            "labels": {kv.LABEL_GROUP: group},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {},
    }
    if message is not None:
        pod["status"]["initContainerStatuses"] = [
            {"name": "tier-survey", "state": {"terminated": {"exitCode": 0, "message": message}}}
        ]
    return pod


def daemonset(desired, generation=1, observed=1):
    return {
        "metadata": {"generation": generation},
        "status": {"observedGeneration": observed, "desiredNumberScheduled": desired},
    }


def test_only_the_first_pod_on_a_node_is_believed() -> None:
    first = member("u1", "node-a", "2026-01-01T00:00:00Z")
    ledger = ts.track({}, [first])
    assert ledger == {"node-a": {"pod": "u1", "entries": None}}
    replacement = member("u2", "node-a", "2026-01-01T00:05:00Z", "entries=12\n")
    ledger = ts.track(ledger, [replacement])  # the first went away unread: its replacement is no evidence
    assert ledger == {"node-a": {"pod": "u1", "entries": None}}
    assert ts.verdict(ledger, [replacement], daemonset(1)) is None  # never answered: no verdict
    fresh = ts.track({}, [member("u3", "node-b", "2026-01-01T00:00:00Z", "entries=0\n")])
    assert ts.load({"data": {"nodes.json": ts.dump(fresh)}}) == fresh


def test_tier_was_empty() -> None:
    a = member("u1", "node-a", "2026-01-01T00:00:00Z", "entries=0\n")
    b = member("u2", "node-b", "2026-01-01T00:00:01Z")
    ledger = ts.track({}, [a, b])
    assert ts.verdict(ledger, [a, b], daemonset(2)) is None  # node-b has not answered
    b = member("u2", "node-b", "2026-01-01T00:00:01Z", "entries=0\n")
    ledger = ts.track(ledger, [a, b])
    assert ts.verdict(ledger, [a, b], daemonset(3)) is None  # a third node has no Pod yet
    assert (
        ts.verdict(ledger, [a, b, member("u9", "", "2026-01-01T00:00:09Z")], daemonset(3)) is None
    )  # scheduling
    assert ts.verdict(ledger, [a, b], daemonset(2, generation=2)) is None  # the DaemonSet not observed
    v = ts.verdict(ledger, [a, b], daemonset(2))
    assert v is not None and (v.status, v.reason) == ("True", "TierEmpty")
    assert ts.verdict({}, [], daemonset(0)) is None  # no node yet: nothing to stand for
    dirty = member("u5", "node-c", "2026-01-01T00:00:02Z", "entries=4\n")
    ledger = ts.track(ledger, [a, b, dirty])
    v = ts.verdict(ledger, [a, b, dirty, member("u6", "", "x")], None)  # False needs no other answer
    assert (
        v is not None
        and (v.status, v.reason) == ("False", "TierNotEmpty")
        and "node-c (4 entries)" in v.message
    )


def node(name, **labels):
    return {"kind": "Node", "metadata": {"name": name, "labels": {"kvcache": "true", **labels}}}


def cleaning(**tier):
    return tiered(dict(TIER, cleanAfterDelete=True, **tier))


NOW = 1767225600.0  # 2026-01-01T00:00:00Z


def running_pod(obj, node_name, created="2026-01-01T00:00:00Z", phase="Running"):
    pod = tr.cleanup_pod(obj, NS, node_name, TIER, IMAGE)
    pod["metadata"]["creationTimestamp"] = created
    pod["status"] = {"phase": phase}
    return pod


def test_cleanup_creates_one_pod_per_node_selected_now() -> None:
    obj = cleaning()
    assert not tc.wanted(tiered()) and tc.wanted(obj)
    plan = tc.plan(
        obj, NS, IMAGE, [node("a"), node("b"), {"metadata": {"name": "c", "labels": {}}}], [], [], {}, NOW
    )
    assert [p["spec"]["nodeName"] for p in plan.create] == ["a", "b"] and plan.running == ["a", "b"]
    assert not plan.done and plan.ledger == {} and plan.events == []


def test_cleanup_outcomes() -> None:
    obj = cleaning()
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods = [
        running_pod(obj, "a", phase="Succeeded"),
        running_pod(obj, "b", phase="Failed"),
        running_pod(obj, "c", created="2025-12-31T23:54:00Z"),  # 6 minutes old, still running
        running_pod(obj, "d", created="2025-12-31T23:58:00Z"),  # 2 minutes old
    ]
    plan = tc.plan(obj, NS, IMAGE, nodes, [], pods, {}, NOW)
    assert plan.ledger == {
        "a": {"outcome": "emptied"},
        "b": {"outcome": "failed"},
        "c": {"outcome": "expired"},
    }
    assert plan.delete == [tr.cleanup_pod_name("mooncake-dram", "c")] and plan.running == ["d"]
    assert [(n, r) for n, r, _ in plan.events] == [
        ("b", kv.EVENT_TIER_NOT_CLEANED),
        ("c", kv.EVENT_TIER_NOT_CLEANED),
        ("c", kv.EVENT_TIER_PARTLY_EMPTIED),
    ]
    # A node already settled is not revisited; once nothing runs, the cleanup is done.
    later = tc.plan(
        obj,
        NS,
        IMAGE,
        nodes,
        [],
        [pods[0], dict(pods[3], status={"phase": "Succeeded"})],
        plan.ledger,
        NOW + 60,
    )
    assert later.done and later.ledger["d"] == {"outcome": "emptied"} and later.events == []
    pending = running_pod(obj, "c", created="2025-12-31T23:54:00Z", phase="Pending")
    never = tc.plan(obj, NS, IMAGE, [node("c")], [], [pending], {}, NOW)
    assert [r for _, r, _ in never.events] == [kv.EVENT_TIER_NOT_CLEANED] and "never started" in never.events[
        0
    ][2]


def test_cleanup_skips_a_path_another_backend_shares_on_that_node() -> None:
    obj = cleaning()
    other = tiered({"path": "/var/lib/kvcache/inner"})
    other["metadata"]["name"] = "other"
    other["spec"]["connection"]["managed"]["members"][1]["nodeSelector"] = {"zone": "1"}
    nodes = [node("a", zone="1"), node("b")]
    plan = tc.plan(obj, NS, IMAGE, nodes, [obj, other], [], {}, NOW)
    assert plan.ledger == {"a": {"outcome": "shared"}} and [p["spec"]["nodeName"] for p in plan.create] == [
        "b"
    ]
    assert (
        plan.events[0][:2] == ("a", kv.EVENT_TIER_SHARED_PATH)
        and "other (/var/lib/kvcache/inner)" in plan.events[0][2]
    )
    # A removal already under way when the path becomes shared is stopped.
    stopped = tc.plan(obj, NS, IMAGE, [node("a", zone="1")], [other], [running_pod(obj, "a")], {}, NOW)
    assert stopped.ledger == {"a": {"outcome": "stopped-shared"}} and stopped.delete
    assert [r for _, r, _ in stopped.events] == [kv.EVENT_TIER_SHARED_PATH, kv.EVENT_TIER_PARTLY_EMPTIED]
    assert tc.overlaps("/a/b", "/a") and tc.overlaps("/a/", "/a") and not tc.overlaps("/a/bc", "/a/b")


def test_cleanup_without_an_image_gives_up_at_once() -> None:
    plan = tc.plan(cleaning(), NS, "", [node("a")], [], [], {}, NOW)
    assert plan.done and plan.ledger == {"a": {"outcome": "no-image"}}
    assert plan.events[0][1] == kv.EVENT_TIER_NOT_CLEANED and "no image" in plan.events[0][2]
