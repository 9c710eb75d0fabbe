"""Benchmark of the ModelDeployment controller (issue 14, item 6).  Prints one JSON object per
figure; asserts nothing.

    python -m loadtests.bench_modeldeployment render --pods 5000
    tests/cluster/up.sh                                  # own GPUSTACK_CLUSTER_DIR / ports if shared
    python -m loadtests.bench_modeldeployment cluster --deployments 100

``render`` (no cluster): the pure render time per Pod (template + stamp + hash) of a two-role
deployment, and the planner's writes for a converged deployment (the target is none).

``cluster``: against a running local control plane with Kueue.  It installs the CRDs, starts every
registered controller in this process (no leader election), creates kwok nodes of 8 × H100 with
their simulated labels and ``Devices`` ledgers, applies ``--deployments`` deployments of two roles
(one card a replica on the H100 pool, or one CPU unit on the CPU-only pool, ``--pool``) in one
namespace, and measures, reading the deployments from the controller's cache every 200 ms:

- ``ready``: from the first apply to every deployment's ``status.phase`` reading ``Ready``;
- ``phases``: when every Pod had been created (the controller), every Workload admitted (Kueue),
  every Pod ready, and every deployment ``Ready`` (the controller's status), in seconds from the
  first apply: where the apply-to-``Ready`` time went;
- ``cpu_per_reconcile_ms``: this process's CPU seconds over that phase divided by the
  ModelDeployment reconciles it ran (the informers and the other controllers' share included, so
  an upper bound);
- ``reconcile_cpu_ms``: the CPU spent inside the ModelDeployment reconciles themselves (thread CPU
  time), per reconcile: the controller's own cost; with ``api_lists``, the passes that listed Pods
  on the API server instead of reading the cache;
- ``per_controller``: the same for every controller in the process that reconciled during that
  phase (reconciles, CPU seconds, milliseconds per reconcile), largest first: run two fleet sizes
  to see which controller's cost per reconcile grows with the fleet;
- ``converged``: every deployment reconciled once more after convergence, and how many of their
  Pods, Services and the deployments themselves changed ``resourceVersion`` (the target is 0).

``--keep`` leaves everything behind; otherwise deployments, then nodes, are deleted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from controllers.modeldeployment import labels, names  # noqa: E402
from controllers.modeldeployment import plan as planner  # noqa: E402
from controllers.modeldeployment.render import Context, Facts, render_role, stamp  # noqa: E402
from controllers.nodedevices.fit import condition_true  # noqa: E402
from controllers.registry import model_deployment_extensions  # noqa: E402
from loadtests import series  # noqa: E402
from readmodels.modeldeployment import Deployment  # noqa: E402

POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
CPU_POOL = "gpustack--generic-linux-amd64"
CPU_IMAGE = "registry.invalid/engine:bench"
NAMESPACE = "bench-md"
PREFIX = "bench-md-"


EMITTED: list[dict[str, Any]] = []  # this run's rows, for --series-out


def emit(**figures: Any) -> None:
    print(json.dumps(figures), flush=True)
    EMITTED.append(figures)


def deployment(name: str, namespace: str = NAMESPACE, replicas: int = 1, pool: str = POOL) -> dict:
    def role(role_name: str, kind: str) -> dict:
        out: dict[str, Any] = {
            "name": role_name,
            "kind": kind,
            "replicas": replicas,
            "size": 1,
            "instanceType": pool,
            "extraArgs": ["--max-model-len", "8192"],
        }
        if pool == POOL:
            out["resources"] = {"accelerator": "1"}
        else:
            out["image"] = CPU_IMAGE  # no runner image is published for a CPU-only pool
        return out

    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [role("prefill", "Prefill"), role("decode", "Decode")],
        },
    }


def instance_type() -> dict:
    return {
        "metadata": {"name": POOL},
        "spec": {
            "acceleratable": True,
            "acceleratorGroup": "nvidia-h100-80gb-hbm3",
            "unitResources": {"cpu": "12", "ram": "192Gi"},
            "localStorage": "100Gi",
        },
        "status": {
            "entrance": "gpustack-fnv64-0000000000000000",
            "detail": {"manufacturer": "nvidia", "runtimeVersion": "12.8", "memory": "80Gi"},
        },
    }


def _context(obj: dict) -> Context:
    md = Deployment(obj)
    ext = model_deployment_extensions()
    return Context(
        md=md,
        uid=obj["metadata"]["uid"],
        instance_types={POOL: instance_type()},
        facts=Facts(),
        cache=ext.cache,
        cache_resolution=ext.cache.resolve(md, lambda *_: None),
        delivery=ext.delivery,
        delivery_resolution=ext.delivery.resolve(md, lambda *_: None),
        topology=ext.topology,
    )


def bench_render(pods: int, deployments: int) -> None:
    per_deployment = max(pods // max(deployments, 1) // 2, 1)
    rendered = 0
    started = time.perf_counter()
    for i in range(deployments):
        ctx = _context(deployment(f"d{i}", replicas=per_deployment))
        for role in ctx.md.roles:
            template = render_role(ctx, role)
            for k in range(role.replicas):
                stamp(ctx, template, k, 0)
                rendered += 1
    elapsed = time.perf_counter() - started
    emit(figure="render_per_pod", pods=rendered, us_per_pod=round(1e6 * elapsed / max(rendered, 1), 1))

    # A converged deployment: the live Pods are exactly the render, every Workload admitted.
    ctx = _context(deployment("converged", replicas=per_deployment))
    roles, live, workloads = [], [], []
    for role in ctx.md.roles:
        template = render_role(ctx, role)
        memo: dict[tuple[int, int], dict] = {}

        def stamped(k: int, m: int, _t: Any = template, _m: dict = memo) -> dict:
            if (k, m) not in _m:
                _m[(k, m)] = stamp(ctx, _t, k, m)
            return _m[(k, m)]

        roles.append(
            planner.RoleInput(
                role.name,
                role.replicas,
                1,
                stamped,
                lambda k, m, _s=stamped: labels.live_hash(_s(k, m)),
                lambda k, _r=role.name: names.pod_group_name(NAMESPACE, "converged", _r, k),
            )
        )
        for k in range(role.replicas):
            pod = json.loads(json.dumps(stamped(k, 0)))
            pod["metadata"].update(name=f"{role.name}-{k}", uid=f"{role.name}-{k}")
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            live.append(pod)
            workloads.append(
                {
                    "metadata": {"name": pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]},
                    "status": {
                        "conditions": [{"type": t, "status": "True"} for t in ("QuotaReserved", "Admitted")]
                    },
                }
            )
    started = time.perf_counter()
    result = planner.plan(roles, live, workloads)
    elapsed = time.perf_counter() - started
    emit(
        figure="converged_plan",
        replicas=len(live),
        writes=result.writes,
        ms=round(1000 * elapsed, 2),
    )


# --- cluster mode ----------------------------------------------------------------------------------


class _ThreadCPU:
    """CPU seconds spent inside a function, on the threads that call it (``time.thread_time``): the
    controller's own cost, without the informers, the other controllers or the benchmark."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def wrap(self, func):
        def timed(*args, **kwargs):
            started = time.thread_time()
            try:
                return func(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                with self._lock:
                    self.seconds += spent
                    self.calls += 1

        return timed


def add_node(client: Any, name: str, product: Any) -> None:
    """A kwok Node of 8 cards of ``product`` and the ``Devices`` its device manager would publish
    (the benchmarks run no node agent; these are that agent's writes, not a controller's)."""
    import harness

    from kube.client import ApiError
    from nodeplugins.devicemanager import simulated

    try:
        client.create(
            harness.fake_node_manifest(
                name,
                labels=simulated.node_labels(name, product, 8),
                capacity=simulated.plugin_capacity(product, 8),
            )
        )
    except ApiError as error:
        if not error.conflict:
            raise
    devices = simulated.devices(name, product, 8)
    client.apply({k: v for k, v in devices.items() if k != "status"}, field_manager="bench-device-manager")
    client.apply(
        {
            "apiVersion": devices["apiVersion"],
            "kind": "Devices",
            "metadata": {"name": name},
            "status": devices["status"],
        },
        field_manager="bench-device-manager",
        subresource="status",
    )


class _Phases:
    """When the run passed each milestone, in seconds from the first apply, from the controller's
    own Pod and Workload caches: every Pod created (the ModelDeployment controller's part), every
    Workload admitted (Kueue's: quota, the two AdmissionChecks), every Pod ready (scheduling and
    the kubelet's, here kwok's), and every deployment's status ``Ready`` (the controller's again)."""

    def __init__(self, pods: int, pod_cache: Any, workload_cache: Any, started: float) -> None:
        self.want = pods
        self.started = started
        self.at: dict[str, float] = {}
        self._created: set[str] = set()
        self._ready: set[str] = set()
        self._admitted: set[str] = set()
        pod_cache.add_handler(self._pod)
        workload_cache.add_handler(self._workload)

    def _mark(self, name: str, seen: set[str]) -> None:
        if len(seen) >= self.want and name not in self.at:
            self.at[name] = time.monotonic() - self.started

    def _pod(self, event: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != NAMESPACE or event == "DELETED":
            return
        self._created.add(meta.get("name", ""))
        self._mark("pods_created_s", self._created)
        if condition_true(obj, "Ready"):
            self._ready.add(meta.get("name", ""))
            self._mark("pods_ready_s", self._ready)

    def _workload(self, event: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != NAMESPACE or event == "DELETED":
            return
        if condition_true(obj, "Admitted"):
            self._admitted.add(meta.get("name", ""))
            self._mark("workloads_admitted_s", self._admitted)

    def figures(self, ready_s: float) -> dict[str, float | None]:
        out: dict[str, float | None] = {
            name: round(self.at[name], 2) if name in self.at else None
            for name in ("pods_created_s", "workloads_admitted_s", "pods_ready_s")
        }
        out["deployments_ready_s"] = round(ready_s, 2)
        return out


def bench_cluster(args: argparse.Namespace) -> int:
    import gpustack
    import harness

    from controllers.registry import CONTROLLERS
    from kube.client import Client, load_api_client
    from kube.informer import key_of
    from kube.manager import RECONCILE_SECONDS, Manager
    from nodeplugins.devicemanager import simulated

    product = simulated.PRODUCTS["NVIDIA H100 80GB HBM3"]
    pool = POOL if args.pool == "h100" else CPU_POOL
    info = harness.info()
    gpustack.install_crds(info)
    gpustack.ensure_namespace(info, gpustack.SYSTEM_NAMESPACE)
    gpustack.ensure_namespace(info, NAMESPACE)
    client = Client(load_api_client(args.kubeconfig or str(info.kubeconfig), component="bench"), timeout=60)
    pods = 2 * args.deployments
    per_node = 8 if pool == POOL else 60  # cards, or 800m-CPU Pods on a 64-core node
    node_names = [f"{PREFIX}{i:04d}" for i in range((pods + per_node - 1) // per_node)]

    with ThreadPoolExecutor(args.threads) as workers:
        list(workers.map(lambda name: add_node(client, name, product), node_names))
    manager = Manager(client, leader_election=False)
    for controller in CONTROLLERS:
        manager.add(controller)
    manager.start(sync_timeout=300)

    def pool_ready() -> bool:
        it = client.get("InstanceType", pool) or {}
        queues, _ = client.list("LocalQueue", NAMESPACE)
        return bool((it.get("status") or {}).get("entrance")) and bool(queues)

    harness.wait_for(pool_ready, timeout=args.timeout, interval=0.5, what="the pool and its LocalQueue")

    def md_reconciles() -> float:
        for metric in RECONCILE_SECONDS.collect():
            for sample in metric.samples:
                if sample.name.endswith("_count") and sample.labels.get("controller") == "model-deployment":
                    return sample.value
        return 0.0

    objs = [deployment(f"{PREFIX}{i:04d}", pool=pool) for i in range(args.deployments)]
    for obj in objs:
        del obj["metadata"]["uid"]
    reconciler: Any = next(c for c in manager.controllers if c.name == "model-deployment")
    # Every controller's own CPU inside its reconciles, so a cost that grows with the fleet can be
    # told apart from the ModelDeployment controller's (the per-controller figure).
    in_reconciles: dict[str, _ThreadCPU] = {}
    for running in manager.controllers:
        timer = in_reconciles[running.name] = _ThreadCPU()
        running.reconcile = timer.wrap(running.reconcile)  # type: ignore[method-assign]
    cpu0, count0, started = time.process_time(), md_reconciles(), time.monotonic()
    phases = _Phases(pods, reconciler.pods, reconciler.workloads, started)
    with ThreadPoolExecutor(args.threads) as workers:
        list(workers.map(client.create, objs))
    # Counted from the controller's own cache's events, not listed: a list of every deployment each
    # 200 ms cost this process and the apiserver more, at 1,000, than the controller did, and a scan
    # of the cache each 200 ms still took 9 % of this process's GIL at 5,000 (py-spy --gil).
    deployments = manager.informer("ModelDeployment")
    ready: set[tuple[str, str]] = set()

    def follow(event: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        if event != "DELETED" and (obj.get("status") or {}).get("phase") == "Ready":
            ready.add(key_of(obj))
        else:
            ready.discard(key_of(obj))

    deployments.add_handler(follow)
    for obj in deployments.list():
        follow("MODIFIED", obj, None)

    def all_ready() -> bool:
        return len(ready) >= args.deployments

    harness.wait_for(all_ready, timeout=args.timeout, interval=0.2, what="every deployment Ready")
    ready_s = time.monotonic() - started
    # The controllers go on reconciling: read the process's figures and every timer at one moment,
    # again if a ModelDeployment reconcile ended in between, so the figures count the same reconciles.
    while True:
        before = md_reconciles()
        cpu = time.process_time() - cpu0
        timers = {name: (timer.calls, timer.seconds) for name, timer in in_reconciles.items()}
        if md_reconciles() == before:
            break
    count = before - count0
    md_calls, md_seconds = timers["model-deployment"]
    emit(figure="ready", pool=args.pool, deployments=args.deployments, pods=pods, seconds=round(ready_s, 2))
    emit(figure="phases", **phases.figures(ready_s))
    emit(
        figure="cpu_per_reconcile_ms",
        reconciles=int(count),
        cpu_seconds=round(cpu, 2),
        ms=round(1000 * cpu / max(count, 1), 2),
    )
    emit(
        figure="reconcile_cpu_ms",
        reconciles=md_calls,
        cpu_seconds=round(md_seconds, 2),
        ms=round(1000 * md_seconds / max(md_calls, 1), 2),
        api_lists=reconciler.members.api_lists,
    )
    emit(
        figure="per_controller",
        controllers={
            name: {
                "reconciles": calls,
                "cpu_seconds": round(seconds, 2),
                "ms": round(1000 * seconds / calls, 3),
            }
            for name, (calls, seconds) in sorted(timers.items(), key=lambda kv: -kv[1][1])
            if calls
        },
    )

    def versions() -> dict[str, str]:
        out = {}
        for kind in ("ModelDeployment", "Pod", "Service"):
            items, _ = client.list(kind, NAMESPACE)
            out.update({f"{kind}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items})
        return out

    time.sleep(2)  # let the last status writes land before the snapshot
    before, count1 = versions(), md_reconciles()
    lists1 = reconciler.members.api_lists
    for obj in objs:
        reconciler.queue.add((NAMESPACE, obj["metadata"]["name"]))
    harness.wait_for(
        lambda: md_reconciles() - count1 >= args.deployments,
        timeout=args.timeout,
        interval=0.2,
        what="a resync",
    )
    after = versions()
    changed = sum(1 for key, version in before.items() if after.get(key) != version)
    emit(
        figure="converged",
        reconciles=int(md_reconciles() - count1),
        objects=len(before),
        changed=changed,
        api_lists=reconciler.members.api_lists - lists1,
    )
    if not args.keep:
        with ThreadPoolExecutor(args.threads) as workers:
            list(
                workers.map(
                    lambda o: client.delete("ModelDeployment", o["metadata"]["name"], NAMESPACE), objs
                )
            )
        harness.wait_for(
            lambda: not client.list("ModelDeployment", NAMESPACE)[0], timeout=args.timeout, interval=1
        )
        with ThreadPoolExecutor(args.threads) as workers:
            list(workers.map(lambda n: client.delete("Node", n), node_names))
            list(workers.map(lambda n: client.delete("Devices", n), node_names))
    manager.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    render = sub.add_parser("render", help="pure render time per Pod; planner writes when converged")
    render.add_argument("--pods", type=int, default=5000)
    render.add_argument("--deployments", type=int, default=50)
    cluster = sub.add_parser("cluster", help="apply-to-Ready, CPU per reconcile, writes when converged")
    cluster.add_argument("--deployments", type=int, default=100)
    cluster.add_argument(
        "--pool",
        choices=("cpu", "h100"),
        default="h100",
        help="the pool the roles run on: the H100 pool's kwok nodes (one card a replica, the pool "
        "filled node after node), or the CPU-only pool (one CPU unit a replica)",
    )
    cluster.add_argument("--threads", type=int, default=8)
    cluster.add_argument("--timeout", type=float, default=1800.0)
    cluster.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or "")
    cluster.add_argument("--keep", action="store_true")
    for mode in (render, cluster):
        series.add_argument(mode)
    args = parser.parse_args(argv)
    if args.mode == "render":
        bench_render(args.pods, args.deployments)
        series.write(args.series_out, "bench_modeldeployment", EMITTED, f"render-{args.pods}")
        return 0
    from gpustack_operator import logs

    logs.configure()  # the controllers' logs, one JSON object a line (which controller, which error)
    logging.getLogger().setLevel(logging.WARNING)  # not every verdict: they would cost this process CPU
    code = bench_cluster(args)
    series.write(args.series_out, "bench_modeldeployment", EMITTED, f"cluster-{args.pool}-{args.deployments}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
