"""KV-cache figures: the Pod injection decision in process, and the ledger round trips of a pool
pass against the real Mooncake master on loopback.

    python -m loadtests.bench_kvcache [--pods 2000] [--tenants 200]

- ``inject``: median and p99 microseconds of one ``webhooks.kvcache.inject.mutate`` decision
  (file lookups, so the figure is the decision, not the apiserver), per engine;
- ``ledger``: a master (ports ``GPUSTACK_MOONCAKE_BENCH_{RPC,ADMIN}_PORT``, defaults: the "bench-store" range of tests/cluster/ports.py)
  with one 64 MiB member; milliseconds to write ``--tenants`` ceilings one PUT each, to read them
  back in one list, and a converge pass that finds nothing to write.

Prints one JSON object per figure; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "cluster"))

import mooncake  # noqa: E402  (tests/cluster/mooncake.py)
import ports  # noqa: E402  (tests/cluster/ports.py)

from controllers.kvcache import admin, quota  # noqa: E402
from tests.webhooks.kvcache_objects import backend, binding, pod, ready_pool  # noqa: E402
from tests.webhooks.reviews import review  # noqa: E402
from webhooks.kvcache import inject  # noqa: E402
from webhooks.lookups import FileLookups  # noqa: E402
from webhooks.review import request_from_review  # noqa: E402


def emit(**figures: Any) -> None:
    print(json.dumps(figures), flush=True)


def bench_inject(count: int) -> None:
    lookups = FileLookups([backend(), ready_pool(), binding()])

    async def decide(request: Any) -> list[float]:
        samples = []
        for _ in range(count):
            started = time.perf_counter_ns()
            decision = await inject.mutate(request, lookups)
            samples.append((time.perf_counter_ns() - started) / 1000)
            assert decision.allowed
        return sorted(samples)

    for engine in ("vLLM", "SGLang"):
        samples = asyncio.run(decide(request_from_review(review(pod(engine=engine)))))
        emit(
            figure="inject",
            engine=engine,
            decisions=count,
            median_us=round(statistics.median(samples), 1),
            p99_us=round(samples[int(len(samples) * 0.99) - 1], 1),
        )


def bench_ledger(tenants: int) -> None:
    with tempfile.TemporaryDirectory() as state:
        master = mooncake.Master(
            Path(state),
            rpc_port=mooncake.port("BENCH_RPC", ports.port("bench-store")),
            admin_port=mooncake.port("BENCH_ADMIN", ports.port("bench-store", 1)),
        )
        member = mooncake.Member(
            Path(state),
            master=master,
            port=mooncake.port("BENCH_MEMBER", ports.port("bench-store", 2)),
            http_port=mooncake.port("BENCH_MEMBER_HTTP", ports.port("bench-store", 3)),
        )
        master.start(fresh_policy=True)
        try:
            member.start()
            client = admin.AdminClient(master.admin_address)
            wanted = {f"bench-{i}": (1 + i % 7) << 20 for i in range(tenants)}
            started = time.perf_counter()
            ledger = quota.Ledger(quota.AVAILABLE)
            quota.converge(client, ledger, wanted)
            wrote = time.perf_counter() - started
            started = time.perf_counter()
            ledger = quota.read_ledger(client, backend())
            read = time.perf_counter() - started
            started = time.perf_counter()
            quota.converge(client, ledger, wanted)
            idle = time.perf_counter() - started
            emit(
                figure="ledger",
                tenants=tenants,
                write_all_ms=round(wrote * 1000, 1),
                per_put_ms=round(wrote * 1000 / tenants, 2),
                read_list_ms=round(read * 1000, 1),
                converged_pass_ms=round(idle * 1000, 2),
                errors=len(ledger.errors),
            )
        finally:
            member.stop()
            master.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--tenants", type=int, default=200)
    args = parser.parse_args(argv)
    bench_inject(args.pods)
    bench_ledger(args.tenants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
