"""The stand-in for the store's Kubernetes Lease backend (standin/lease_master.py): the campaign's
decisions against an apiserver double that keeps resourceVersions as the real one does, and the
argv the real master is started with."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest

from standin import lease_master as lm
from standin.kube import APIError

NS, NAME = "gpustack-system", "mooncake-dram-leader"
RENDERED = ["-rpc_port=50051", "-metrics_port=9003", "-default_kv_lease_ttl=300000",
            "-enable_ha=true", "-ha_backend_type=k8s", f"-ha_backend_connstring={NS}/{NAME}",
            "-rpc_address=10.244.1.7", f"-cluster_id={NAME}", "-pod_name=leader-abc",
            "-pod_namespace=gpustack-system"]  # fmt: skip


class Leases:
    """Lease objects under optimistic concurrency: a PUT with a stale resourceVersion is a 409."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.version = 0

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        prefix = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
        assert path.startswith(prefix), path
        name = path[len(prefix) :].lstrip("/")
        if method == "GET":
            if name not in self.stored:
                raise APIError(404, "not found")
            return copy.deepcopy(self.stored[name])
        assert body is not None
        name = name or body["metadata"]["name"]
        if method == "POST" and name in self.stored:
            raise APIError(409, "already exists")
        if method == "PUT":
            if name not in self.stored:
                raise APIError(404, "not found")
            if body["metadata"].get("resourceVersion") != self.stored[name]["metadata"]["resourceVersion"]:
                raise APIError(409, "the object has been modified")
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.stored[name] = stored
        return copy.deepcopy(stored)


def elector(api: Leases, me: str) -> lm.Elector:
    return lm.Elector(api, NS, NAME, me)  # type: ignore[arg-type]


def test_the_first_campaign_creates_the_lease_with_the_rpc_address_as_identity() -> None:
    api = Leases()
    me = lm.identity(RENDERED)
    assert me == "10.244.1.7:50051"
    assert elector(api, me).try_acquire(1_000.0)
    spec = api.stored[NAME]["spec"]
    assert spec["holderIdentity"] == me and spec["leaseDurationSeconds"] == lm.LEASE_SECONDS
    assert spec["acquireTime"] == spec["renewTime"] == "1970-01-01T00:16:40.000000Z"
    assert spec["leaseTransitions"] == 0


def test_a_live_holder_keeps_the_lease_and_an_expired_one_loses_it() -> None:
    api = Leases()
    assert elector(api, "10.0.0.1:50051").try_acquire(1_000.0)
    other = elector(api, "10.0.0.2:50051")
    assert not other.try_acquire(1_000.0 + lm.LEASE_SECONDS - 1)
    assert api.stored[NAME]["spec"]["holderIdentity"] == "10.0.0.1:50051"
    assert other.try_acquire(1_000.0 + lm.LEASE_SECONDS + 1)
    spec = api.stored[NAME]["spec"]
    assert spec["holderIdentity"] == "10.0.0.2:50051" and spec["leaseTransitions"] == 1
    # The old holder finds out at its next renewal.
    assert not elector(api, "10.0.0.1:50051").renew(1_000.0 + lm.LEASE_SECONDS + 2)


def test_the_holder_renews_and_gives_the_lease_up_on_release() -> None:
    api = Leases()
    me = elector(api, "10.0.0.1:50051")
    assert me.try_acquire(1_000.0)
    assert me.renew(1_005.0)
    assert api.stored[NAME]["spec"]["renewTime"] == lm.micro_time(1_005.0)
    me.release()
    assert api.stored[NAME]["spec"]["holderIdentity"] == ""
    # A released Lease is free at once, without a transition counted for nobody.
    assert elector(api, "10.0.0.2:50051").try_acquire(1_006.0)
    assert api.stored[NAME]["spec"]["leaseTransitions"] == 0


def test_two_candidates_racing_for_an_expired_lease_elect_one() -> None:
    api = Leases()
    assert elector(api, "10.0.0.1:50051").try_acquire(0.0)
    a, b = elector(api, "10.0.0.2:50051"), elector(api, "10.0.0.3:50051")
    seen = a._get()  # both read the same expired Lease …
    original = a._get
    a._get = lambda: copy.deepcopy(seen)  # type: ignore[method-assign]
    assert b.try_acquire(100.0)  # … b writes first
    assert not a.try_acquire(100.0)  # a's write carries the stale resourceVersion
    a._get = original  # type: ignore[method-assign]
    assert api.stored[NAME]["spec"]["holderIdentity"] == "10.0.0.3:50051"


def test_two_candidates_creating_the_lease_elect_one() -> None:
    api = Leases()
    a, b = elector(api, "10.0.0.2:50051"), elector(api, "10.0.0.3:50051")
    a._get = lambda: None  # type: ignore[method-assign]  # a saw no Lease before b created it
    assert b.try_acquire(0.0)
    assert not a.try_acquire(0.0)


def test_the_master_runs_without_the_election_flags_it_does_not_have() -> None:
    assert lm.campaigns(RENDERED)
    assert lm.without_election(RENDERED) == ["-rpc_port=50051", "-metrics_port=9003",
                                             "-default_kv_lease_ttl=300000", "-rpc_address=10.244.1.7",
                                             f"-cluster_id={NAME}"]  # fmt: skip
    assert not lm.campaigns(["-rpc_port=50051"])
    assert not lm.campaigns(["-enable_ha=true", "-ha_backend_type=etcd"])


def test_without_an_election_the_master_is_exec_d_with_its_argv_unchanged() -> None:
    run = subprocess.run([sys.executable, "-m", "standin.lease_master", "/bin/echo", "-rpc_port=50051", "x y"],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert run.returncode == 0 and run.stdout == "-rpc_port=50051 x y\n"


@pytest.mark.parametrize("connstring", ["", "only-a-name", "/x"])
def test_a_connection_string_without_namespace_and_name_is_refused(connstring: str) -> None:
    argv = ["-enable_ha=true", "-ha_backend_type=k8s", f"-ha_backend_connstring={connstring}"]
    run = subprocess.run([sys.executable, "-m", "standin.lease_master", "/bin/true", *argv],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert run.returncode == 2 and "<namespace>/<lease>" in run.stderr
