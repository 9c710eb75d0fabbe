"""KV cache end to end (kv-cache spec §3–§6): the worker (webhooks and controllers) on the local
control plane, and the real Mooncake master on loopback as an external backend.

The seeds' examples apply and render the managed store; an external backend pointing at the local
master goes Ready with figures from its metrics; two Bindings in two namespaces get their ceilings
into the master's own ledger and its grants into their status; a Pod with the binding annotation
gets the client configuration; deleting a pool with Bindings is held; a Binding whose domain still
holds data is not released; a stopped master gives Error and the backend comes back.  Every check
reads the master's ledger through its admin API, or the objects the operator wrote.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import gpustack
import harness
import pytest

from tests.e2e.objects import get

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import mooncake
import ports

pytestmark = pytest.mark.e2e

MiB = 1 << 20
SUFFIX = uuid.uuid4().hex[:5]
TEAM_A, TEAM_B = f"kv-team-a-{SUFFIX}", f"kv-team-b-{SUFFIX}"
BACKEND, POOL = f"local-{SUFFIX}", f"local-pool-{SUFFIX}"
EXAMPLES = harness.REPO_ROOT / "examples"
NS = "gpustack-system"


def wait(predicate, what: str, timeout: float = 90):
    return harness.wait_for(predicate, timeout=timeout, interval=1, what=what)


def conditions(obj: dict | None) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""))
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    }


def phase(obj: dict | None) -> str:
    return ((obj or {}).get("status") or {}).get("phase", "")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[mooncake.Master, mooncake.Member]]:
    master, member = mooncake.loopback(tmp_path_factory.mktemp("kv-e2e"), "E2E", ports.e2e("store"))
    with mooncake.serving(master, member):
        yield master, member


@pytest.fixture(scope="module")
def worker(cluster: harness.ClusterInfo) -> Iterator[gpustack.Operator]:
    """The whole worker: every webhook and every controller, as the chart runs it."""
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)
    for namespace in (TEAM_A, TEAM_B):
        gpustack.ensure_namespace(cluster, namespace)
        harness.wait_for_default_service_account(cluster, namespace)
    try:
        yield op
    finally:
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)


def pool(name: str, backend: str, total: str) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCachePool",
        "metadata": {"name": name},
        "spec": {"backends": [backend], "quota": {"total": total}},
    }


def binding(name: str, namespace: str, pool_name: str, ceiling: str, domain: str) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCachePoolBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "poolRef": {"name": pool_name},
            "quota": {"ceiling": ceiling},
            "domain": {"name": domain, "blockSize": 64, "dtype": "bfloat16"},
        },
    }


def test_seed_examples_render_the_managed_store(cluster, worker) -> None:
    for name in ("30-kvcachebackend-mooncake-dram.yaml", "31-kvcachepool-shared-dram.yaml"):
        cluster.kubectl("apply", "-f", str(EXAMPLES / name))
    gpustack.ensure_namespace(cluster, "team-a")
    cluster.kubectl("apply", "-f", str(EXAMPLES / "32-kvcachepoolbinding-qwen-cache.yaml"))
    deployment = wait(lambda: get(cluster, "deployment", "mooncake-dram-leader", NS), "the leader Deployment")
    assert deployment["metadata"]["annotations"]["kvcache.gpustack.ai/backend"] == "mooncake-dram"
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    leader = deployment["spec"]["template"]["spec"]["containers"][0]
    assert leader["image"] == "gpustack/mirrored-mooncake:0.3.13.post1-cpu"
    assert "-enable_multi_tenants=true" in leader["args"]
    service = get(cluster, "service", "mooncake-dram-leader", NS)
    assert [p["port"] for p in service["spec"]["ports"]] == [50051, 9003]
    members = get(cluster, "daemonset", "mooncake-dram-members-0", NS)
    assert members["spec"]["updateStrategy"]["type"] == "OnDelete"
    member = members["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in member["env"]}
    assert env["MOONCAKE_TE_META_DATA_SERVER"] == "P2PHANDSHAKE" and "MOONCAKE_DEVICE" not in env
    assert member["resources"]["requests"]["memory"] == "9Gi"
    # The pool's pass may seed before the Binding reaches its cache (`tenants: []`); a later pass
    # rewrites the seed whole: wait for that document, not for the ConfigMap.
    held = 'version: 1\ntenants:\n  - name: "default"\n    quota: 4294967296\n'

    def seeded() -> str | None:
        seed = get(cluster, "configmap", "mooncake-dram-quota-policy", NS)
        document = ((seed or {}).get("data") or {}).get("tenant_quotas.yaml")
        return document if document == held else None

    try:
        wait(seeded, "the quota policy seed to hold the default domain's 4 GiB")
    except TimeoutError:
        last = get(cluster, "configmap", "mooncake-dram-quota-policy", NS)
        raise AssertionError(
            f"the seed never held the domain: {((last or {}).get('data') or {})!r}"
        ) from None
    backend = wait(
        lambda: (
            (b := get(cluster, "kvcachebackend", "mooncake-dram"))
            and (b.get("status") or {}).get("usedBy")
            and b
        ),
        "the pool's claim on the backend",
    )
    assert backend["status"]["usedBy"] == [{"kind": "KVCachePool", "namespace": "", "name": "shared-dram"}]
    assert {e["name"]: e["address"] for e in backend["status"]["endpoints"]}[
        "Client"
    ] == "mooncake-dram-leader.gpustack-system.svc:50051"
    shared = wait(  # the binding's domain and the backend's endpoint join the status in later passes
        lambda: (
            (p := get(cluster, "kvcachepool", "shared-dram"))
            and phase(p)
            and p["status"].get("domains")
            and p["status"].get("clientEndpoint")
            and p
        ),
        "the pool's status with the binding's domain and the backend's client endpoint",
    )
    assert shared["status"]["clientEndpoint"] == "mooncake-dram-leader.gpustack-system.svc:50051"
    assert shared["status"]["domains"][0]["binding"] == {"namespace": "team-a", "name": "qwen-cache"}
    # Deleting the backend is held while the pool claims it.
    cluster.kubectl("delete", "kvcachebackend", "mooncake-dram", "--wait=false")
    held = wait(
        lambda: (b := get(cluster, "kvcachebackend", "mooncake-dram")) and phase(b) == "Deleting" and b,
        "Deleting",
    )
    assert "shared-dram" in held["status"]["phaseMessage"]
    assert get(cluster, "deployment", "mooncake-dram-leader", NS) is not None
    # The leader never started (no cluster DNS from this host): the chain unwinds without asking it.
    cluster.kubectl("delete", "-f", str(EXAMPLES / "32-kvcachepoolbinding-qwen-cache.yaml"), "--wait=false")
    cluster.kubectl("delete", "kvcachepool", "shared-dram", "--wait=false")
    wait(lambda: get(cluster, "kvcachebackend", "mooncake-dram") is None, "the backend gone", timeout=180)
    assert get(cluster, "deployment", "mooncake-dram-leader", NS) is None
    assert get(cluster, "daemonset", "mooncake-dram-members-0", NS) is None


def test_external_backend_goes_ready_with_figures_from_the_master(cluster, worker, store) -> None:
    master, _ = store
    cluster.apply(mooncake.external_backend(BACKEND, master))
    backend = wait(
        lambda: (b := get(cluster, "kvcachebackend", BACKEND)) and phase(b) == "Ready" and b, "Ready"
    )
    assert backend["status"]["capacity"]["total"] == "64Mi"
    found = conditions(backend)
    assert found["LeaderAvailable"][0] == "True" and found["CapacityObserved"][0] == "True"
    assert found["MembersMounted"][0] == "True"
    (row,) = backend["status"]["members"]
    assert row["segmentID"] == master.segments()[0]["segment_id"] and "nodeName" not in row
    assert {e["name"]: e["address"] for e in backend["status"]["endpoints"]}["Admin"] == master.admin_address


def test_two_bindings_get_ceilings_in_the_ledger_and_grants_in_status(cluster, worker, store) -> None:
    master, _ = store
    cluster.apply(pool(POOL, BACKEND, "80Mi"))
    cluster.apply(binding("chat", TEAM_A, POOL, "48Mi", f"chat-{SUFFIX}"))
    cluster.apply(binding("chat", TEAM_B, POOL, "48Mi", f"chat-b-{SUFFIX}"))
    a, b = f"chat-{SUFFIX}", f"chat-b-{SUFFIX}"
    ledger = wait(
        lambda: {a, b} <= set(master.tenant_quotas()) and master.tenant_quotas(), "both tenants in the ledger"
    )
    assert ledger[a]["requested_quota_bytes"] == ledger[b]["requested_quota_bytes"] == 48 * MiB
    assert ledger[a]["effective_quota_bytes"] == 32 * MiB  # the store recut both grants to fit 64Mi
    granted = wait(
        lambda: (
            (x := get(cluster, "kvcachepoolbinding", "chat", TEAM_A))
            and (x.get("status") or {}).get("effectiveQuota") == "32Mi"
            and x
        ),
        "the grant in status",
    )
    assert granted["status"]["requestedQuota"] == "48Mi" and granted["status"]["usage"] == "0"
    assert granted["status"]["overQuota"] is False and phase(granted) == "Ready"
    assert (
        conditions(granted)["QuotaGranted"] == ("True", "Granted")
        and conditions(granted)["DomainExclusive"][0] == "True"
    )
    the_pool = wait(
        lambda: (p := get(cluster, "kvcachepool", POOL)) and phase(p) == "Ready" and p, "the pool Ready"
    )
    assert the_pool["status"]["clientEndpoint"] == master.client_address
    assert sorted(d["name"] for d in the_pool["status"]["domains"]) == sorted([a, b])
    assert conditions(the_pool)["QuotaWithinTotal"] == (
        "False",
        "Oversubscribed",
    )  # 96Mi asked of 80Mi: reported, not refused
    assert conditions(the_pool)["QuotaLedgerAvailable"] == ("True", "Available")
    # A ceiling change converges in the master's own ledger.
    cluster.kubectl(
        "patch",
        "kvcachepoolbinding",
        "chat",
        "-n",
        TEAM_B,
        "--type=merge",
        "-p",
        '{"spec":{"quota":{"ceiling":"16Mi"}}}',
    )
    wait(
        lambda: master.tenant_quotas()[b]["requested_quota_bytes"] == 16 * MiB,
        "the new ceiling in the ledger",
    )
    wait(lambda: master.tenant_quotas()[a]["effective_quota_bytes"] == 48 * MiB, "team-a's grant restored")


def test_bad_bindings_are_refused_or_reported(cluster, worker) -> None:
    cluster.apply(binding("orphan", TEAM_A, f"nope-{SUFFIX}", "1Gi", f"orphan-{SUFFIX}"))
    orphan = wait(
        lambda: (x := get(cluster, "kvcachepoolbinding", "orphan", TEAM_A)) and phase(x) == "Error" and x,
        "Error",
    )
    assert f"nope-{SUFFIX}" in orphan["status"]["phaseMessage"]
    cluster.kubectl("delete", "kvcachepoolbinding", "orphan", "-n", TEAM_A)
    proc = cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(binding("copy", TEAM_B, POOL, "1Mi", f"chat-{SUFFIX}")),
        check=False,
    )
    assert proc.returncode != 0 and f"{TEAM_A}/chat" in proc.stderr
    proc = cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(binding("zero", TEAM_B, POOL, "0", "zero")), check=False
    )
    assert proc.returncode != 0 and "spec.quota.ceiling" in proc.stderr


def inject_pod(name: str, binding_name: str, **annotations: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": TEAM_A,
            "labels": {"kvcache.gpustack.ai/inject": "true"},
            "annotations": {
                "kvcache.gpustack.ai/binding": binding_name,
                "kvcache.gpustack.ai/engine": "vLLM",
                **annotations,
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": "vllm/vllm-openai:v0.29.0",
                    "command": ["vllm"],
                    "args": ["serve", "m"],
                }
            ]
        },
    }


def test_a_pod_with_the_binding_annotation_gets_the_client_configuration(cluster, worker, store) -> None:
    master, _ = store
    wait(
        lambda: conditions(get(cluster, "kvcachepool", POOL)).get("QuotaLedgerAvailable", ("",))[0] == "True",
        "ledger",
    )
    cluster.apply(inject_pod("bench", "chat"))
    pod = get(cluster, "pod", "bench", TEAM_A)
    config = json.loads(pod["metadata"]["annotations"]["kvcache.gpustack.ai/client-config"])
    assert (
        config["master_server_address"] == master.client_address and config["tenant_id"] == f"chat-{SUFFIX}"
    )
    record = json.loads(pod["metadata"]["annotations"]["kvcache.gpustack.ai/injected"])
    assert record["vehicle"] == "file" and record["tenantInjected"] is True and record["binding"] == "chat"
    container = pod["spec"]["containers"][0]
    assert {"name": "MOONCAKE_CONFIG_PATH", "value": "/etc/gpustack/kvcache/mooncake.json"} in container[
        "env"
    ]
    assert container["args"][2:4] == [
        "--kv-transfer-config",
        '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}',
    ]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "gpustack-kvcache-config")
    assert "configMap" not in volume and volume["downwardAPI"]["items"][0]["path"] == "mooncake.json"
    # Refusals: another namespace's Binding, and editing what the webhook wrote.
    proc = cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(inject_pod("cross", f"{TEAM_B}/chat")), check=False
    )
    assert proc.returncode != 0 and "kvcache.gpustack.ai/binding" in proc.stderr
    proc = cluster.kubectl(
        "annotate",
        "pod",
        "bench",
        "-n",
        TEAM_A,
        "--overwrite",
        "kvcache.gpustack.ai/client-config={}",
        check=False,
    )
    assert proc.returncode != 0 and "client-config" in proc.stderr
    cluster.kubectl(
        "patch",
        "pod",
        "bench",
        "-n",
        TEAM_A,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["example.com/x"]}}',
    )
    cluster.kubectl(
        "patch", "pod", "bench", "-n", TEAM_A, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    cluster.kubectl("delete", "pod", "bench", "-n", TEAM_A, "--grace-period=0", "--force", check=False)


def test_deletions_are_held_and_no_domain_holding_data_is_released(cluster, worker, store) -> None:
    master, _ = store
    a = f"chat-{SUFFIX}"
    cluster.kubectl("delete", "kvcachepool", POOL, "--wait=false")
    held = wait(
        lambda: (p := get(cluster, "kvcachepool", POOL)) and conditions(p).get("Releasable") and p,
        "Releasable",
    )
    assert conditions(held)["Releasable"] == ("False", "HeldByBindings") and phase(held) == "Deleting"
    assert f"{TEAM_A}/chat" in held["status"]["phaseMessage"]
    assert mooncake.tenant_write(master, a, ["k0", "k1"]) == {"k0": 0, "k1": 0}
    wait(
        lambda: (
            ((get(cluster, "kvcachepoolbinding", "chat", TEAM_A) or {}).get("status") or {}).get("usage")
            == "2Mi"
        ),
        "usage in status",
    )
    cluster.kubectl("delete", "kvcachepoolbinding", "chat", "-n", TEAM_A, "--wait=false")
    stuck = wait(
        lambda: (
            (x := get(cluster, "kvcachepoolbinding", "chat", TEAM_A))
            and conditions(x).get("Releasable")
            and x
        ),
        "the binding's Releasable",
    )
    assert (
        conditions(stuck)["Releasable"] == ("False", "LedgerNotReleased")
        and a in stuck["status"]["phaseMessage"]
    )
    assert a in master.tenant_quotas()  # the store still holds the domain's data: nothing released
    mooncake.tenant_remove(master, a, ["k0", "k1"])
    wait(lambda: get(cluster, "kvcachepoolbinding", "chat", TEAM_A) is None, "the binding gone", timeout=120)
    assert a not in master.tenant_quotas()
    cluster.kubectl("delete", "kvcachepoolbinding", "chat", "-n", TEAM_B)
    wait(lambda: get(cluster, "kvcachepool", POOL) is None, "the pool gone", timeout=120)
    assert f"chat-b-{SUFFIX}" not in master.tenant_quotas()
    backend = wait(
        lambda: (b := get(cluster, "kvcachebackend", BACKEND)) and not b["status"].get("usedBy") and b,
        "claim dropped",
    )
    assert conditions(backend)["Deletable"][0] == "True"


def test_a_stopped_master_gives_error_and_comes_back(cluster, worker, store) -> None:
    master, member = store
    master.stop()
    down = wait(
        lambda: (b := get(cluster, "kvcachebackend", BACKEND)) and phase(b) == "Error" and b,
        "Error",
        timeout=60,
    )
    assert "capacity" not in down["status"] and conditions(down)["LeaderAvailable"][0] == "False"
    master.start()
    member.stop()
    # The old member may have re-mounted into the restarted master before it stopped: the master
    # counts its segment until the client's TTL runs out, and a new member meanwhile doubles the total.
    wait(lambda: not master.segments(), "the stopped member's segment gone from the master", timeout=60)
    member.start()
    back = wait(
        lambda: (b := get(cluster, "kvcachebackend", BACKEND)) and phase(b) == "Ready" and b,
        "Ready again",
        timeout=90,
    )
    assert back["status"]["capacity"]["total"] == "64Mi"
    cluster.kubectl("delete", "kvcachebackend", BACKEND)
