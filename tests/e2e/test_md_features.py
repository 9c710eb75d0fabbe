"""The ModelDeployment controller's KV cache and model delivery, end to end on the local control
plane with the real Kueue, the real Mooncake master on loopback (the store behind an external
KVCacheBackend) and the local hub (the weights behind the ModelArtifact).

The seeds apply as published — the artifact (40), the pool (31), the Binding (32) and the
``qwen-chat`` deployment with ``kvCache`` and ``artifactRef`` (50) — moved into this module's
namespace; the backend is the external one pointing at the local master (the seed's managed store
cannot start without cluster DNS), under the seed's name so the pool seed applies unchanged; the hub
serves a small repository under the seed's repository name.  The deployment's Pod runs on a kwok
node of the seed's InstanceType.  What is checked, through kubectl and the master's own admin API:

- the Pod carries the store connector, its env and the ``client-config`` annotation naming the
  master, and the pinned commit (Engine delivery); the Binding's ``usedBy`` names the deployment;
  ``DomainRegistered`` is ``Registered``, ``CacheAttached`` turns ``CacheActive`` once the master
  charges the domain, ``WeightsReady`` and ``status.model`` report the artifact;
- a pool endpoint change rolls the deployment onto the new address;
- a deployment whose artifact is unresolved creates no Pod and says why;
- deleting the Binding in use is held with the deployment named; deleting the deployment releases
  the registration (no reconcile error), and the Binding then goes, its ledger entry with it.

Ports: ``GPUSTACK_MD_HUB_PORT`` (a free port when unset) and ``GPUSTACK_MOONCAKE_MD_{RPC,ADMIN,
MEMBER,MEMBER_HTTP}_PORT`` (the "e2e-store" range of tests/cluster/ports.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import gpustack
import harness
import localhub
import pytest
import yaml

from api import constants
from tests.e2e.objects import condition, delete_artifacts, get, pool_ready, setting
from tests.hub.repos import HubRepos

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import mooncake
import nodes
import ports

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SUFFIX = uuid.uuid4().hex[:5]
NS = f"md-feat-{SUFFIX}"
SYSTEM = gpustack.SYSTEM_NAMESPACE
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"  # the seed's instanceType
NODE = f"mdf-a10g-{SUFFIX}"
SLOT = 16  # this module's device-manager port (tests/cluster/nodes.py)
BACKEND, POOL, BINDING, ARTIFACT, MD = "mooncake-dram", "shared-dram", "qwen-cache", "qwen-7b", "qwen-chat"
SEED_REPOSITORY = "Qwen/Qwen2.5-7B-Instruct"
TENANT = "default"  # the seed Binding names no domain
ENTRY = {"kind": "ModelDeployment", "namespace": NS, "name": MD}
WAIT = 240


def wait(predicate, what: str, timeout: float = WAIT):
    return harness.wait_for(predicate, timeout=timeout, interval=1, what=what)


def pods_of(cluster: harness.ClusterInfo, name: str) -> list[dict]:
    selector = f"{constants.LABEL_APP_INSTANCE}={name}"
    return cluster.kubectl_json("get", "pods", "-n", NS, "-l", selector)["items"]


def seed(path: str) -> dict:
    obj = yaml.safe_load((EXAMPLES / path).read_text())
    if obj["metadata"].get("namespace"):
        obj["metadata"]["namespace"] = NS
    return obj


def main(pod: dict) -> dict:
    return next(ct for ct in pod["spec"]["containers"] if ct["name"] == "main")


def reconcile_errors(op: gpustack.Operator) -> float:
    return gpustack.scrape(op).get(
        'gpustack_controller_reconcile_errors_total{controller="model-deployment"}', 0.0
    )


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The local hub serving a small repository under the seed's name; (endpoint, commit)."""
    root = tmp_path_factory.mktemp("md-hub")
    port = localhub.port_from("GPUSTACK_MD_HUB_PORT")
    with localhub.serving(root, port, cluster.state_dir / "logs" / "md-features-hub.log") as endpoint:
        repos = HubRepos(root)
        repos.create(SEED_REPOSITORY)
        commit = repos.commit(
            SEED_REPOSITORY, {"config.json": b'{"model_type": "qwen2"}\n', "model.safetensors": bytes(4096)}
        )
        yield endpoint, commit


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mooncake.Master]:
    with mooncake.serving(
        *mooncake.loopback(tmp_path_factory.mktemp("md-kv"), "MD", ports.e2e("store", 4))
    ) as master:
        yield master


@pytest.fixture(scope="module")
def env(cluster: harness.ClusterInfo, hub: tuple[str, str], store: mooncake.Master):
    endpoint, _ = hub
    for kind, name in (("kvcachepool", POOL), ("kvcachebackend", BACKEND)):
        if get(cluster, kind, name) is not None:
            pytest.fail(f"{kind} {name} is left over from another run: delete it first")
    op = gpustack.install(cluster)
    cluster.apply(setting("model-artifact-huggingface-endpoint", endpoint))
    gpustack.ensure_namespace(cluster, NS)
    harness.wait_for_default_service_account(cluster, NS)
    node = None
    try:
        # A kwok node whose publish-only device manager writes its Devices and NodeFeature.
        node = nodes.start_node(cluster, NODE, "a10g-4.yaml", slot=SLOT, real=False)
        gpustack.start_worker(cluster, op, "--no-leader-election")
        wait(
            lambda: pool_ready(cluster, A10G_POOL, NS),
            "the A10G pool with an entrance and the namespace's LocalQueues",
        )
        yield cluster, op, store
    finally:
        # Whatever a failed test left, in the order the holds allow (each waited out, bounded).
        cluster.kubectl("delete", "modeldeployments", "--all", "-n", NS, "--wait=false", check=False)
        with contextlib.suppress(AssertionError, mooncake.StoreError):
            mooncake.tenant_remove(store, TENANT, ["blk-0", "blk-1"])
        for kind, name, namespace in (
            ("modeldeployment", MD, NS),
            ("kvcachepoolbinding", BINDING, NS),
            ("kvcachepool", POOL, ""),
            ("kvcachebackend", BACKEND, ""),
        ):
            where = ["-n", namespace] if namespace else []
            cluster.kubectl("delete", kind, name, *where, "--wait=false", "--ignore-not-found", check=False)
            with contextlib.suppress(TimeoutError):
                wait(
                    lambda k=kind, n=name, ns=namespace: get(cluster, k, n, ns) is None, f"{kind} {name} gone"
                )
        delete_artifacts(cluster, NS, WAIT)
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        cluster.kubectl(
            "delete",
            "setting",
            "model-artifact-huggingface-endpoint",
            "-n",
            SYSTEM,
            "--ignore-not-found",
            check=False,
        )
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        if node is not None:
            nodes.remove_node(cluster, node)


# --- tests -------------------------------------------------------------------------------------------


def test_the_seed_deployment_carries_the_cache_client_and_its_weights(env, hub) -> None:
    cluster, _, master = env
    _, commit = hub
    cluster.apply(mooncake.external_backend(BACKEND, master))
    for path in ("31-kvcachepool-shared-dram.yaml", "32-kvcachepoolbinding-qwen-cache.yaml"):
        cluster.apply(seed(path))
    cluster.apply(seed("40-modelartifact-qwen-7b.yaml"))
    art = wait(
        lambda: (
            (a := get(cluster, "modelartifact", ARTIFACT, NS)) and condition(a, "Resolved")[0] == "True" and a
        ),
        "the seed artifact Resolved against the local hub",
    )
    assert art["status"]["resolved"]["revision"] == commit
    wait(
        lambda: condition(get(cluster, "kvcachepool", POOL), "QuotaLedgerAvailable")[0] == "True",
        "the pool's ledger on the local master",
    )
    cluster.apply(seed("50-modeldeployment-qwen-chat.yaml"))

    def ready() -> dict | None:
        obj = get(cluster, "modeldeployment", MD, NS)
        done = (obj or {}).get("status", {}).get("phase") == "Ready"
        return obj if done and condition(obj, "DomainRegistered")[1] == "Registered" else None

    try:
        obj = wait(ready, "qwen-chat Ready and Registered")
    except TimeoutError as error:
        raise TimeoutError(f"{error}: {json.dumps(get(cluster, 'modeldeployment', MD, NS))[:4000]}") from None
    (pod,) = pods_of(cluster, MD)
    annotation = json.loads(pod["metadata"]["annotations"][constants.ANNOTATION_KVCACHE_CLIENT_CONFIG])
    assert annotation["master_server_address"] == master.client_address and annotation["tenant_id"] == TENANT
    container = main(pod)
    line = container["command"]
    assert line[:5] == ["vllm", "serve", SEED_REPOSITORY, "--revision", commit]
    assert json.loads(line[line.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": "kv_both",
    }
    assert line[line.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert line[line.index("--served-model-name") + 1] == SEED_REPOSITORY
    env_vars = {e["name"]: e.get("value") for e in container["env"]}
    assert env_vars["MOONCAKE_CONFIG_PATH"] == "/etc/gpustack/kvcache/mooncake.json"
    assert env_vars["HF_ENDPOINT"] == hub[0] and env_vars["HF_HOME"] == "/var/lib/gpustack/model-cache"
    projected = next(v for v in pod["spec"]["volumes"] if "downwardAPI" in v)
    assert projected["downwardAPI"]["items"][0]["path"] == "mooncake.json"
    assert pod["metadata"]["labels"][constants.LABEL_KVCACHE_INJECT] == "false"  # injection leaves it alone
    binding = get(cluster, "kvcachepoolbinding", BINDING, NS)
    assert binding["status"]["usedBy"] == [ENTRY]
    status = obj["status"]
    assert status["kvCache"] == {
        "binding": BINDING,
        "pool": POOL,
        "domain": {"name": TENANT, "dtype": "bfloat16", "blockSize": 64},
    }
    assert status["model"] == {
        "artifact": ARTIFACT,
        "revision": commit,
        "manifestDigest": art["status"]["resolved"]["manifestDigest"],
        "delivery": "Engine",
    }
    assert condition(obj, "WeightsReady")[:2] == ("True", "Downloaded")
    # The store charges the domain for what an engine writes under its tenant: CacheAttached.
    assert condition(obj, "CacheAttached")[:2] == ("Unknown", "NoObservationAvailable")
    assert mooncake.tenant_write(master, TENANT, ["blk-0", "blk-1"]) == {"blk-0": 0, "blk-1": 0}
    active = wait(
        lambda: (
            (o := get(cluster, "modeldeployment", MD, NS))
            and condition(o, "CacheAttached")[1] == "CacheActive"
            and o
        ),
        "CacheAttached from the master's charge",
    )
    assert condition(active, "CacheAttached")[0] == "True" and "2Mi" in condition(active, "CacheAttached")[2]


def test_a_pool_endpoint_change_rolls_the_deployment(env) -> None:
    cluster, _, master = env
    (before,) = pods_of(cluster, MD)
    moved = f"localhost:{master.rpc_port}"  # the same master, by another name
    cluster.apply(mooncake.external_backend(BACKEND, master, client=moved))
    wait(
        lambda: (get(cluster, "kvcachepool", POOL) or {}).get("status", {}).get("clientEndpoint") == moved,
        "the pool publishing the new endpoint",
    )

    def rolled() -> dict | None:
        current = [p for p in pods_of(cluster, MD) if not p["metadata"].get("deletionTimestamp")]
        if len(current) != 1 or current[0]["metadata"]["uid"] == before["metadata"]["uid"]:
            return None
        obj = get(cluster, "modeldeployment", MD, NS)
        return current[0] if condition(obj, "ReplicasUpToDate")[1] == "UpToDate" else None

    after = wait(rolled, "the replica replaced with the new endpoint")
    config = json.loads(after["metadata"]["annotations"][constants.ANNOTATION_KVCACHE_CLIENT_CONFIG])
    assert config["master_server_address"] == moved
    assert (
        after["metadata"]["annotations"][constants.ANNOTATION_POD_SPEC_HASH]
        != before["metadata"]["annotations"][constants.ANNOTATION_POD_SPEC_HASH]
    )


def test_a_deployment_whose_artifact_is_unresolved_creates_no_pod(env) -> None:
    cluster, _, _ = env
    cluster.apply(
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "ModelArtifact",
            "metadata": {"name": "missing", "namespace": NS},
            "spec": {"source": {"huggingFace": {"repository": "org/does-not-exist"}}},
        }
    )
    wait(
        lambda: condition(get(cluster, "modelartifact", "missing", NS), "Resolved")[0] == "False",
        "the artifact refused by the hub",
    )
    obj = seed("50-modeldeployment-qwen-chat.yaml")
    obj["metadata"]["name"] = "unresolved"
    obj["spec"]["model"]["artifactRef"] = {"name": "missing"}
    del obj["spec"]["kvCache"]
    cluster.apply(obj)
    held = wait(
        lambda: (
            (o := get(cluster, "modeldeployment", "unresolved", NS)) and condition(o, "WeightsReady")[0] and o
        ),
        "WeightsReady on the unresolved deployment",
    )
    status, reason, message = condition(held, "WeightsReady")
    assert (status, reason) == ("False", "ArtifactNotResolved") and "missing" in message
    assert "no replica is created" in held["status"]["phaseMessage"]
    assert held["status"]["model"] == {"artifact": "missing", "delivery": "Engine"}
    assert held["metadata"]["finalizers"] == [constants.FINALIZER_MODEL_DEPLOYMENT]  # reconciled, and
    assert pods_of(cluster, "unresolved") == []  # nothing was created
    cluster.kubectl("delete", "modeldeployment", "unresolved", "-n", NS)
    cluster.kubectl("delete", "modelartifact", "missing", "-n", NS)


def test_a_binding_in_use_is_held_and_deleting_the_deployment_releases_it(env) -> None:
    cluster, op, master = env
    cluster.kubectl("delete", "kvcachepoolbinding", BINDING, "-n", NS, "--wait=false")
    held = wait(
        lambda: (
            (b := get(cluster, "kvcachepoolbinding", BINDING, NS)) and condition(b, "Releasable")[0] and b
        ),
        "the Binding's Releasable",
    )
    status, reason, message = condition(held, "Releasable")
    assert (status, reason) == ("False", "HeldByWorkloads") and f"ModelDeployment {NS}/{MD}" in message
    wait(
        lambda: (
            condition(get(cluster, "modeldeployment", MD, NS), "DomainRegistered")[1] == "BindingDeleting"
        ),
        "the deployment told its Binding is going",
    )
    errors = reconcile_errors(op)
    cluster.kubectl("delete", "modeldeployment", MD, "-n", NS, "--wait=false")
    wait(lambda: get(cluster, "modeldeployment", MD, NS) is None, "the deployment gone")
    assert reconcile_errors(op) == errors  # the release raised nothing
    # The registration is gone; the domain still holds data, so the ledger entry stays until it is removed.
    wait(
        lambda: (
            not ((get(cluster, "kvcachepoolbinding", BINDING, NS) or {}).get("status") or {}).get("usedBy")
        ),
        "the registration released",
    )
    assert mooncake.tenant_remove(master, TENANT, ["blk-0", "blk-1"]) == {"blk-0": 0, "blk-1": 0}
    wait(lambda: get(cluster, "kvcachepoolbinding", BINDING, NS) is None, "the Binding gone")
    assert TENANT not in master.tenant_quotas()
