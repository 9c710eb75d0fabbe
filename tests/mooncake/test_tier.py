"""The disk tier against the real store (kv-cache spec §5.1 step 7): the master started with the
offload flags the leader renders, the backend image's member program (``mc_store_rest_server``)
started with the environment the member DaemonSet renders, writes as an engine makes them until
buckets of the operator's size reach the disk, and the rendered preStop hook run against it.

The one substitution is the leader's address: the rendered ``MOONCAKE_MASTER`` is a Service name
this host cannot resolve, so the member is pointed at the local master instead, and its Pod IP
(a downward-API reference) is 127.0.0.1.  Everything else is the operator's rendering verbatim.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api import kvcache as kv
from controllers.kvcache import admin, backend_status
from controllers.kvcache import leader_render as lr
from controllers.kvcache import members_render as mr
from controllers.kvcache import tier_render as tr
from tests.mooncake.conftest import port
from tests.webhooks.kvcache_objects import backend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import mooncake

MiB = 1 << 20
SEGMENT = 64 * MiB  # small, so a few thousand writes fill it and eviction offloads
NS = "gpustack-system"
GRACE = 2


def tiered(path: Path) -> dict:
    obj = backend()
    managed = obj["spec"]["connection"]["managed"]
    managed["leader"]["electionBackend"] = "None"  # the wheel's master has no Lease backend
    managed["scaleIn"] = {"gracePeriodSeconds": GRACE}
    managed["members"][0].update(
        capacityPerMember="64Mi",
        localBufferSize="16Mi",
        localDisks=[
            {
                "path": str(path),
                "capacity": "512Mi",
                "keyLimit": 4096,
                "eviction": {"enabled": True, "policy": "LRU", "watermark": {"high": 90, "low": 80}},
            }
        ],
    )
    return obj


def rendered_member(obj: dict, master: mooncake.Master, http_port: int) -> tuple[list[str], dict[str, str]]:
    """The member container's argv and environment as the DaemonSet renders them."""
    (ds,) = mr.member_daemonsets(obj, NS, "unused")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    env = {}
    for entry in container["env"]:
        if "valueFrom" in entry:
            assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
            env[entry["name"]] = "127.0.0.1"
        else:
            env[entry["name"]] = entry["value"]
    assert env[kv.ENV_MASTER] == "mooncake-dram-leader.gpustack-system.svc:50051"
    env[kv.ENV_MASTER] = master.client_address
    argv = list(container["args"])
    argv[argv.index("--port") + 1] = str(http_port)
    return argv, env


@pytest.fixture(scope="module")
def tier(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[mooncake.Master, mooncake.RestMember, dict, Path]]:
    state = tmp_path_factory.mktemp("mooncake-tier")
    directory = state / "tier"
    directory.mkdir()
    obj = tiered(directory)
    offload = [a for a in lr.leader_args(obj, NS) if "offload" in a]
    assert offload == ["-enable_offload=true", "-offload_on_evict=true"]
    master = mooncake.Master(
        state,
        rpc_port=port("TIER_RPC"),
        admin_port=port("TIER_ADMIN"),
        name="tier-master",
        multi_tenancy=False,  # the tier needs no ledger; writes go to the default tenant
        extra_args=tuple(offload),
    )
    master.start(fresh_policy=True)
    argv, env = rendered_member(obj, master, port("TIER_MEMBER_HTTP"))
    member = mooncake.RestMember(state, argv=argv, env=env)
    try:
        member.start()
        yield master, member, obj, directory
    finally:
        member.stop()
        master.stop()


def wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_rendered_member_mounts_its_segment_and_its_tier(tier) -> None:
    master, _, obj, _ = tier
    wait(lambda: master.metrics().get("master_total_file_capacity_bytes") == 512 * MiB, "the tier registered")
    (segment,) = master.segments()
    assert segment["size_bytes"] == SEGMENT and segment["status"] == "OK"
    seen = backend_status.observe(admin.AdminClient(master.admin_address))
    capacity = backend_status.capacity(seen, tiered=True)
    assert capacity is not None and capacity["total"] == "576Mi"  # the segment plus the tier's ceiling
    status = backend_status.derive(obj, seen, endpoints=[], pods=[], stamp="2026-01-01T00:00:00Z")
    assert status["capacity"]["total"] == "576Mi"


def fill(master: mooncake.Master, count: int) -> None:
    """Write ``count`` 32 KiB objects (more than the segment holds: eviction offloads)."""
    written = mooncake.tenant_write(master, "default", [f"k{i}" for i in range(count)], size=32 * 1024)
    assert sum(1 for code in written.values() if code == 0) >= SEGMENT // (32 * 1024)


def test_buckets_of_the_operators_size_reach_the_disk(tier) -> None:
    master, _, _, directory = tier
    wait(lambda: master.metrics().get("master_total_file_capacity_bytes") == 512 * MiB, "the tier registered")
    fill(master, 3000)
    bucket = 512 * 32 * 1024  # one bucket of 512 objects
    # The offload runs behind the writes: the tier's byte count grows in steps until a whole bucket
    # is on disk, so wait for that amount rather than for the first nonzero reading.
    wait(
        lambda: (master.metrics().get("master_allocated_file_size_bytes") or 0) >= bucket,
        "a bucket's bytes on the tier",
        timeout=90,
    )
    assert any(f.suffix == ".bucket" for f in directory.iterdir())
    # The survey the next member on this node would run now reads this backend's own buckets.
    sh = shutil.which("sh")
    if sh is not None:
        out = directory.parent / "survey-message"
        command = tr.survey_container("unused", "IfNotPresent")["command"]

        def surveyed() -> tuple[int, int] | None:
            """The survey's count and the directory's, from a run the backend wrote nothing during
            (it may still be offloading the last evictions when the first bucket shows)."""
            before = sorted(directory.iterdir())
            assert subprocess.run([sh, *command[1:4], str(directory), str(out)], timeout=30).returncode == 0
            if sorted(directory.iterdir()) != before:
                return None
            return int(out.read_text().removeprefix("entries=")), len(before)

        reported, present = wait(surveyed, "a survey the backend did not write during", timeout=60)
        assert reported == present > 0


def test_a_bucket_of_513_objects_is_never_written(tmp_path: Path) -> None:
    """Why the operator's bucket holds 512 objects: one more and every bucket write fails."""
    directory = tmp_path / "tier"
    directory.mkdir()
    obj = tiered(directory)
    offload = [a for a in lr.leader_args(obj, NS) if "offload" in a]
    master = mooncake.Master(
        tmp_path,
        rpc_port=port("TIER_LIMIT_RPC"),
        admin_port=port("TIER_LIMIT_ADMIN"),
        name="tier-limit-master",
        multi_tenancy=False,
        extra_args=tuple(offload),
    )
    master.start(fresh_policy=True)
    argv, env = rendered_member(obj, master, port("TIER_LIMIT_MEMBER_HTTP"))
    assert env[kv.ENV_OFFLOAD_BUCKET_KEYS] == str(kv.TIER_BUCKET_KEYS) == "512"
    env[kv.ENV_OFFLOAD_BUCKET_KEYS] = "513"
    member = mooncake.RestMember(tmp_path, argv=argv, env=env, name="tier-limit-member")
    try:
        member.start()
        fill(master, 3000)
        wait(
            lambda: "FILE_WRITE_FAIL" in member.log_tail(200_000),
            "the member's failed bucket write",
            timeout=90,
        )
        assert master.metrics().get("master_allocated_file_size_bytes") == 0
        assert not any(f.suffix == ".bucket" for f in directory.iterdir())
    finally:
        member.stop()
        master.stop()


def test_the_rendered_prestop_hook_deregisters_the_tier(tier) -> None:
    master, member, obj, _ = tier
    wait(lambda: master.metrics().get("master_total_file_capacity_bytes") == 512 * MiB, "the tier registered")
    (ds,) = mr.member_daemonsets(obj, NS, "unused")
    command = ds["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "python3" and command[-1] == str(GRACE)
    command = [sys.executable, *command[1:-2], str(member.port), command[-1]]  # this host's python3
    done = subprocess.run(command, capture_output=True, text=True, timeout=GRACE + 60)
    assert done.returncode == 0, done.stderr
    assert master.metrics().get("master_total_file_capacity_bytes") == 0
    assert [s["status"] for s in master.segments()] == ["OK"]  # the memory segment stays mounted
