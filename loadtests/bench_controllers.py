"""Benchmark of the controllers that key on a namespace-wide or cluster-wide list (issue 34, item 1):
Instances, KV-cache pool bindings and model-delivery consumers, each at a multiple of the size its
e2e modules run.  Prints one JSON object per figure; asserts nothing.

    tests/cluster/up.sh                                   # own GPUSTACK_CLUSTER_DIR / ports if shared
    python -m loadtests.bench_controllers --scale 1       # the e2e size ("1x")
    python -m loadtests.bench_controllers --scale 10      # 10x: compare the two runs

Like ``bench_modeldeployment cluster`` it installs the CRDs, creates kwok nodes of 8 x H100 with
their simulated labels and ``Devices`` ledgers, and runs every registered controller in this process
(no leader election, no webhook server).  Every object it creates is first judged by the operator's
own admission chain (``webhooks.chain.run`` against the live cluster, as ``gpustack-operator admit``
does) and created as admitted (mutations applied; a denial stops the run); nothing writes a status
that one of our controllers is responsible for.  Then, per kind (``--kinds``, all three by default,
one after the other, each cleaned up before the next):

- ``instances``: ``--scale`` x 6 Instances (test_instances holds six at once: the seed's and five
  bad-input ones), one whole H100 card each, in one namespace; converged when every status reads
  ``phase: Ready``.  Measured: the ``instances`` controller.
- ``kv-bindings``: ``--scale`` x 2 KVCachePoolBindings (test_kvcache's two, in two namespaces) on one
  KVCachePool over an external KVCacheBackend that is the real Mooncake master on loopback (with a
  64 MB member, as test_kvcache runs it; ``scripts/ensure-mooncake.sh`` installs it); converged
  when every Binding reads ``phase: Ready`` with its ``effectiveQuota`` from the master's ledger.
  Measured: ``kv-cache-pool-bindings`` and ``kv-cache-pools`` (one key for the pool: its pass
  covers every Binding, so its cost per reconcile is expected to grow with them; the figure per
  Binding is printed too).
- ``delivery``: ``--scale`` x (one ModelArtifact, one ModelDeployment and one Instance consuming it:
  test_md_node_delivery's set), the artifacts resolved against the local hub (``tests/hub``) through
  the ``model-artifact-huggingface-endpoint`` Setting, the Instances mounting theirs through the
  ``model.csi.gpustack.ai`` CSIDriver (created when absent: the chart's object; kwok runs no
  kubelet, so nothing mounts); converged when every artifact is ``Ready`` and every consumer's
  phase is ``Ready``.  Measured: ``model-artifacts`` (it keeps each namespace's consumers in an
  index and maps their events to its keys).

Figures per kind:

- ``converge``: objects, seconds from the first create to converged, and for the measured
  controllers and every other controller that reconciled meanwhile: reconciles, CPU seconds inside
  ``reconcile`` (thread CPU, as ``bench_modeldeployment``'s ``per_controller``), milliseconds per
  reconcile, and the events their watch mappers judged with the microseconds per event (a mapper
  that scans a list runs on the informer's thread, outside ``reconcile``);
- ``resync``: every key of the measured controllers (and, for ``delivery``, of the consumers'
  controllers) enqueued once more after convergence: the reconciles that ran and how many of the
  kind's objects, their Pods and Services changed ``resourceVersion`` (``rewritten``; the target
  is 0).

``--keep`` leaves everything behind.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from loadtests import series  # noqa: E402
from loadtests.bench_modeldeployment import EMITTED, POOL, _ThreadCPU, add_node, emit  # noqa: E402

KINDS = ("instances", "kv-bindings", "delivery")
# Objects of each kind the e2e modules create at once (1x), per unit of --scale.
E2E_SIZE = {"instances": 6, "kv-bindings": 2, "delivery": 1}
MEASURED = {
    "instances": ("instances",),
    "kv-bindings": ("kv-cache-pool-bindings", "kv-cache-pools"),
    "delivery": ("model-artifacts",),
}
PREFIX = "bench-ctl-"
NS_INSTANCES = f"{PREFIX}instances"
NS_KV = (f"{PREFIX}kv-a", f"{PREFIX}kv-b")
NS_DELIVERY = f"{PREFIX}delivery"
KV_BACKEND, KV_POOL = f"{PREFIX}store", f"{PREFIX}pool"
CSI_DRIVER = "model.csi.gpustack.ai"
HUB_ENDPOINT_SETTING = "model-artifact-huggingface-endpoint"


# --- the objects, as a user writes them ----------------------------------------------------------


def instance(name: str, namespace: str, model: str = "") -> dict:
    spec: dict[str, Any] = {
        "type": POOL,
        "image": "ubuntu:24.04",
        "command": ["tail", "-f", "/dev/null"],
        "resources": {"accelerator": "1"},
        "volume": {"ephemeral": {"capacity": "1Gi"}},
    }
    if model:
        spec["additionalVolumes"] = [{"mountPath": "/models/m", "model": {"artifactRef": {"name": model}}}]
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def kv_pool() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCachePool",
        "metadata": {"name": KV_POOL},
        "spec": {"backends": [KV_BACKEND], "quota": {"total": "1Gi"}},
    }


def kv_binding(name: str, namespace: str, domain: str) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCachePoolBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "poolRef": {"name": KV_POOL},
            "quota": {"ceiling": "2Mi"},
            "domain": {"name": domain, "blockSize": 64, "dtype": "bfloat16"},
        },
    }


def artifact(name: str, namespace: str, repository: str) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelArtifact",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"huggingFace": {"repository": repository, "revision": "main"}}},
    }


def consumer_deployment(name: str, namespace: str, repository: str, model: str) -> dict:
    """test_md_node_delivery's deployment: one role, one card, weights from the artifact."""
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": repository, "artifactRef": {"name": model}},
            "engine": {"name": "vLLM", "image": "gpustack/runner:cuda13.0-vllm0.29.0"},
            "roles": [{"name": "server", "instanceType": POOL, "resources": {"accelerator": 1}}],
        },
    }


def setting(name: str, value: str) -> dict:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": "gpustack-system"},
        "spec": {"value": value},
    }


# --- the run ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Timers:
    """Thread CPU inside each controller's ``reconcile`` and inside its watch mappers."""

    reconciles: dict[str, _ThreadCPU] = dataclasses.field(default_factory=dict)
    mappers: dict[str, _ThreadCPU] = dataclasses.field(default_factory=dict)

    def timed(self, factory: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def make(manager: Any) -> Any:
            controller = factory(manager)
            reconcile = self.reconciles[controller.name] = _ThreadCPU()
            mapper = self.mappers[controller.name] = _ThreadCPU()
            controller.reconcile = reconcile.wrap(controller.reconcile)
            watches = controller.watches
            controller.watches = lambda: [
                dataclasses.replace(w, mapper=mapper.wrap(w.mapper)) for w in watches()
            ]
            return controller

        return make

    def snapshot(self) -> dict[str, tuple[int, float, int, float]]:
        return {
            name: (t.calls, t.seconds, self.mappers[name].calls, self.mappers[name].seconds)
            for name, t in self.reconciles.items()
        }


def _row(calls: int, seconds: float, events: int, mapped: float) -> dict[str, Any]:
    return {
        "reconciles": calls,
        "cpu_seconds": round(seconds, 3),
        "ms": round(1000 * seconds / calls, 3) if calls else None,
        "mapper_events": events,
        "mapper_us": round(1e6 * mapped / events, 1) if events else None,
    }


def _delta(
    before: dict[str, tuple[int, float, int, float]], after: dict[str, tuple[int, float, int, float]]
) -> dict[str, tuple[int, float, int, float]]:
    return {
        name: (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])
        for name, a in after.items()
        for b in [before.get(name, (0, 0.0, 0, 0.0))]
    }


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import gpustack
        import harness

        from gpustack_operator.admit_cluster import ClusterLookups
        from kube.client import Client, load_api_client

        self.args = args
        self.harness = harness
        self.gpustack = gpustack
        self.info = harness.info()
        self.client = Client(load_api_client(args.kubeconfig or str(self.info.kubeconfig)), timeout=60)
        self.lookups = lambda: ClusterLookups(self.client, label="the benchmark's cluster")
        self.timers = Timers()
        self.manager: Any = None
        self.nodes: list[str] = []

    # --- objects through the admission chain ---------------------------------------------------------

    def admitted(self, obj: dict, lookups: Any = None) -> dict:
        """``obj`` as the operator's webhooks would store it (their mutations applied); a denial
        stops the benchmark: it creates only what a user could apply."""
        from webhooks import chain

        outcome = asyncio.run(chain.run(obj, lookups or self.lookups()))
        meta = obj["metadata"]
        if not outcome.allowed:
            raise SystemExit(f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}: {outcome.message}")
        return outcome.object or obj

    def create_all(self, objs: Iterable[dict]) -> None:
        lookups = self.lookups()  # one batch: its reads cached once
        judged = [self.admitted(o, lookups) for o in objs]
        with ThreadPoolExecutor(self.args.threads) as workers:
            list(workers.map(self.client.create, judged))

    def apply(self, obj: dict, manager: str = "bench-controllers") -> None:
        self.client.apply(self.admitted(obj), field_manager=manager)

    # --- cluster set-up ---------------------------------------------------------------------------

    def start(self, pods: int) -> None:
        from controllers.registry import CONTROLLERS
        from kube.manager import Manager
        from nodeplugins.devicemanager import simulated

        gpustack, harness = self.gpustack, self.harness
        gpustack.install_crds(self.info)
        for namespace in (gpustack.SYSTEM_NAMESPACE, NS_INSTANCES, *NS_KV, NS_DELIVERY):
            gpustack.ensure_namespace(self.info, namespace)
        product = simulated.PRODUCTS["NVIDIA H100 80GB HBM3"]
        self.nodes = [f"{PREFIX}{i:03d}" for i in range(max((pods + 7) // 8, 1))]

        with ThreadPoolExecutor(self.args.threads) as workers:
            list(workers.map(lambda name: add_node(self.client, name, product), self.nodes))
        self.manager = Manager(self.client, leader_election=False)
        for controller in CONTROLLERS:
            self.manager.add(self.timers.timed(controller))
        self.manager.start(sync_timeout=300)

        def pool_ready() -> bool:
            # Active and counting every node, not only named: a pool drained by an earlier run's
            # node removal reads Inactive until its nodes are counted again, and the Instance
            # controller stops an Instance of an Inactive type (the StopPolicy rule).
            it = self.client.get("InstanceType", POOL) or {}
            status = it.get("status") or {}
            if _phase(it) != "Active" or not status.get("entrance"):
                return False
            # Every node's cards counted: the Instance webhook refuses a request over the count.
            counted = (status.get("accelerator") or {}).get("capacity") or "0"
            if harness.parse_quantity(counted) < 8 * len(self.nodes):
                return False
            queue = self.client.get("ClusterQueue", POOL)
            if _condition(queue, "Active") != "True":
                return False
            return all(self.client.list("LocalQueue", ns)[0] for ns in (NS_INSTANCES, NS_DELIVERY))

        harness.wait_for(
            pool_ready, timeout=self.args.timeout, interval=0.5, what="the pool and its LocalQueues"
        )

    def stop(self) -> None:
        if not self.args.keep:
            with ThreadPoolExecutor(self.args.threads) as workers:
                list(workers.map(lambda n: self.client.delete("Node", n), self.nodes))
                list(workers.map(lambda n: self.client.delete("Devices", n), self.nodes))
        if self.manager is not None:
            self.manager.stop()

    def controller(self, name: str) -> Any:
        return next(c for c in self.manager.controllers if c.name == name)

    # --- one kind: create, converge, resync ------------------------------------------------------------

    def measure(
        self,
        kind: str,
        objects: int,
        create: Callable[[], None],
        converged: Callable[[], bool],
        keys: dict[str, Sequence[Hashable]],
        watched: list[tuple[str, str]],
    ) -> None:
        """``create`` the objects, wait for ``converged``, print the figures; then enqueue ``keys``
        (controller -> its keys) once more and count what changed among ``watched`` (kind, namespace)."""
        harness = self.harness
        before, started = self.timers.snapshot(), time.monotonic()
        create()
        harness.wait_for(converged, timeout=self.args.timeout, interval=0.2, what=f"{kind} converged")
        seconds = time.monotonic() - started
        spent = _delta(before, self.timers.snapshot())
        emit(
            figure="converge",
            kind=kind,
            objects=objects,
            seconds=round(seconds, 2),
            controllers={name: _row(*spent[name]) for name in MEASURED[kind]},
            others={
                name: _row(*row)
                for name, row in sorted(spent.items(), key=lambda kv: -kv[1][1])
                if row[0] and name not in MEASURED[kind]
            },
        )
        if kind == "kv-bindings":
            pools = spent["kv-cache-pools"]
            emit(
                figure="kv_pool_pass_per_binding",
                bindings=objects,
                ms=round(1000 * pools[1] / max(pools[0], 1) / max(objects, 1), 3),
            )

        def versions() -> dict[str, str]:
            out = {}
            for what, namespace in watched:
                items, _ = self.client.list(what, namespace)
                out.update(
                    {
                        f"{what}/{namespace}/{i['metadata']['name']}": i["metadata"]["resourceVersion"]
                        for i in items
                    }
                )
            return out

        time.sleep(2)  # let the last status writes land before the snapshot
        snapshot, start_calls = versions(), self.timers.snapshot()
        for name, queued in keys.items():
            queue = self.controller(name).queue
            for key in queued:
                queue.add(key)

        def resynced() -> bool:
            now = self.timers.snapshot()
            return all(now[n][0] - start_calls[n][0] >= len(k) for n, k in keys.items())

        harness.wait_for(resynced, timeout=self.args.timeout, interval=0.2, what=f"{kind}: a resync")
        time.sleep(1)  # a write the resync sent reaches the store before the second read
        after = versions()
        done = self.timers.snapshot()
        emit(
            figure="resync",
            kind=kind,
            reconciles={n: done[n][0] - start_calls[n][0] for n in keys},
            objects=len(snapshot),
            rewritten=sum(1 for key, version in snapshot.items() if after.get(key) != version),
        )

    def delete_and_wait(self, targets: list[tuple[str, str, str]]) -> None:
        """Delete (kind, namespace, name) and wait until every one is gone (their finalizers are our
        controllers' to release)."""
        with ThreadPoolExecutor(self.args.threads) as workers:
            list(workers.map(lambda t: self.client.delete(t[0], t[2], t[1]), targets))
        self.harness.wait_for(
            lambda: all(self.client.get(k, name, ns) is None for k, ns, name in targets),
            timeout=self.args.timeout,
            interval=1,
            what="the benchmark's objects gone",
        )

    # --- the three kinds ----------------------------------------------------------------------------

    def instances(self, count: int) -> None:
        objs = [instance(f"{PREFIX}{i:04d}", NS_INSTANCES) for i in range(count)]
        cache = self.manager.informer("Instance")

        def ready() -> bool:
            return sum(1 for o in cache.list() if _phase(o) == "Ready" and _ns(o) == NS_INSTANCES) >= count

        self.measure(
            "instances",
            count,
            lambda: self.create_all(objs),
            ready,
            {"instances": [(NS_INSTANCES, o["metadata"]["name"]) for o in objs]},
            [("Instance", NS_INSTANCES), ("Pod", NS_INSTANCES), ("Service", NS_INSTANCES)],
        )
        if not self.args.keep:
            self.delete_and_wait([("Instance", NS_INSTANCES, o["metadata"]["name"]) for o in objs])

    def kv_bindings(self, count: int) -> None:
        import mooncake

        from tests.net import free_port

        state = Path(tempfile.mkdtemp(prefix="bench-ctl-kv-"))
        master = mooncake.Master(state, rpc_port=free_port(), admin_port=free_port())
        member = mooncake.Member(state, master=master, port=free_port(), http_port=free_port())
        with mooncake.serving(master, member):
            self.apply(mooncake.external_backend(KV_BACKEND, master))
            self.apply(kv_pool())
            self.harness.wait_for(
                lambda: (
                    _phase(self.client.get("KVCacheBackend", KV_BACKEND)) == "Ready"
                    and bool(
                        (self.client.get("KVCachePool", KV_POOL) or {})
                        .get("status", {})
                        .get("clientEndpoint")
                    )
                ),
                timeout=self.args.timeout,
                interval=0.5,
                what="the external backend Ready and the pool on it",
            )
            objs = [kv_binding(f"{PREFIX}{i:04d}", NS_KV[i % 2], f"{PREFIX}{i:04d}") for i in range(count)]
            cache = self.manager.informer("KVCachePoolBinding")
            ours = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs}

            def granted() -> bool:
                done = 0
                for b in cache.list():
                    if (_ns(b), b["metadata"]["name"]) in ours and _phase(b) == "Ready":
                        done += bool((b.get("status") or {}).get("effectiveQuota"))
                return done >= count

            keys: dict[str, Sequence[Hashable]] = {
                "kv-cache-pool-bindings": sorted(ours),
                "kv-cache-pools": [KV_POOL],
            }
            self.measure(
                "kv-bindings",
                count,
                lambda: self.create_all(objs),
                granted,
                keys,
                [
                    *(("KVCachePoolBinding", ns) for ns in NS_KV),
                    ("KVCachePool", ""),
                    ("KVCacheBackend", ""),
                ],
            )
            if not self.args.keep:
                self.delete_and_wait(
                    [
                        *(("KVCachePoolBinding", ns, name) for ns, name in sorted(ours)),
                        ("KVCachePool", "", KV_POOL),
                        ("KVCacheBackend", "", KV_BACKEND),
                    ]
                )

    def delivery(self, units: int) -> None:
        import localhub

        from tests.hub.repos import HubRepos
        from tests.net import free_port

        root = Path(tempfile.mkdtemp(prefix="bench-ctl-hub-"))
        log = self.info.state_dir / "logs" / "bench-controllers-hub.log"
        repos = HubRepos(root)
        names = [f"{PREFIX}{i:04d}" for i in range(units)]
        for name in names:
            repos.create(f"bench/{name}")
            repos.commit(
                f"bench/{name}",
                {"config.json": b'{"model_type": "qwen2"}\n', "model.safetensors": bytes(8192)},
            )
        created_driver = self.client.get("CSIDriver", CSI_DRIVER) is None
        with localhub.serving(root, free_port(), log) as endpoint:
            self.apply(setting(HUB_ENDPOINT_SETTING, endpoint))
            if created_driver:
                self.client.create(
                    {
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "CSIDriver",
                        "metadata": {"name": CSI_DRIVER},
                        "spec": {
                            "attachRequired": False,
                            "podInfoOnMount": True,
                            "volumeLifecycleModes": ["Ephemeral"],
                            "fsGroupPolicy": "None",
                        },
                    }
                )
            objs = []
            for name in names:
                objs.append(artifact(name, NS_DELIVERY, f"bench/{name}"))
                objs.append(consumer_deployment(f"{name}-md", NS_DELIVERY, f"bench/{name}", name))
                objs.append(instance(f"{name}-nb", NS_DELIVERY, model=name))
            artifacts = self.manager.informer("ModelArtifact")
            deployments = self.manager.informer("ModelDeployment")
            instances = self.manager.informer("Instance")

            def ready() -> bool:
                arts = sum(
                    1 for a in artifacts.list() if _ns(a) == NS_DELIVERY and _condition(a, "Ready") == "True"
                )
                consumers = sum(
                    1
                    for o in (*deployments.list(), *instances.list())
                    if _ns(o) == NS_DELIVERY and _phase(o) == "Ready"
                )
                return arts >= units and consumers >= 2 * units

            keys: dict[str, Sequence[Hashable]] = {
                "model-artifacts": [(NS_DELIVERY, n) for n in names],
                "instances": [(NS_DELIVERY, f"{n}-nb") for n in names],
                "model-deployment": [(NS_DELIVERY, f"{n}-md") for n in names],
            }
            self.measure(
                "delivery",
                3 * units,
                lambda: self.create_all(objs),
                ready,
                keys,
                [
                    (kind, NS_DELIVERY)
                    for kind in ("ModelArtifact", "ModelDeployment", "Instance", "Pod", "Service")
                ],
            )
            if not self.args.keep:
                self.delete_and_wait(
                    [
                        *(("ModelDeployment", NS_DELIVERY, f"{n}-md") for n in names),
                        *(("Instance", NS_DELIVERY, f"{n}-nb") for n in names),
                    ]
                )
                self.delete_and_wait([("ModelArtifact", NS_DELIVERY, n) for n in names])
                self.client.delete("Setting", HUB_ENDPOINT_SETTING, "gpustack-system")
                if created_driver:
                    self.client.delete("CSIDriver", CSI_DRIVER)


def _ns(obj: dict | None) -> str:
    return ((obj or {}).get("metadata") or {}).get("namespace") or ""


def _phase(obj: dict | None) -> str:
    return ((obj or {}).get("status") or {}).get("phase") or ""


def _condition(obj: dict | None, kind: str) -> str:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return str(cond.get("status") or "")
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scale", type=int, default=1, help="multiple of each kind's e2e size (1: 1x, 10: 10x)"
    )
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)} (default: all)"
    )
    for kind in KINDS:
        parser.add_argument(
            f"--{kind}",
            type=int,
            default=None,
            help=f"how many (units, for delivery) instead of --scale x {E2E_SIZE[kind]}",
        )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or "")
    parser.add_argument("--keep", action="store_true")
    series.add_argument(parser)
    args = parser.parse_args(argv)
    from gpustack_operator import logs

    logs.configure()  # the controllers' logs, one JSON object a line, on standard error
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; use {', '.join(KINDS)}")
    counts = {k: getattr(args, k.replace("-", "_")) or args.scale * E2E_SIZE[k] for k in kinds}
    pods = counts.get("instances", 0) + 2 * counts.get("delivery", 0)
    bench = Bench(args)
    bench.start(pods)
    emit(
        figure="setup", scale=args.scale, counts=counts, nodes=len(bench.nodes), load_average=os.getloadavg()
    )
    try:
        if "instances" in counts:
            bench.instances(counts["instances"])
        if "kv-bindings" in counts:
            bench.kv_bindings(counts["kv-bindings"])
        if "delivery" in counts:
            bench.delivery(counts["delivery"])
    finally:
        bench.stop()
    series.write(args.series_out, "bench_controllers", EMITTED, f"scale-{args.scale}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
