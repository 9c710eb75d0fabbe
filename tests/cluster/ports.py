"""Every fixed loopback port the tests, `make dev` and the benchmarks use: one table of ranges.

`make test` runs two lanes at once (tests/run_suite.py): the e2e lane (its control plane, real
kubelet nodes, stores) and everything else beside it, while a `make dev` cluster may be running
too. A port two of them take makes one fail at random, so no default port is written anywhere but
here, the ranges do not overlap (``tests/unit/test_ports.py``), and all lie below the Linux
ephemeral range (32768-60999), where the kernel never hands out an outgoing connection's port and
``free_port()`` never lands. Every value can still be pinned from the environment where the code
that uses it says so.

``tests/cluster/lib.sh`` repeats the dev control plane's ports for the shell; the unit test keeps
the two equal.
"""

from __future__ import annotations

import os
from typing import NamedTuple


class Range(NamedTuple):
    first: int
    last: int
    who: str

    def port(self, offset: int = 0) -> int:
        port = self.first + offset
        if not self.first <= port <= self.last:
            raise ValueError(f"port offset {offset} is outside {self.first}-{self.last} ({self.who})")
        return port


# The order of a control plane block (lib.sh, harness, the e2e conftest).
CONTROL_PLANE = (
    "ETCD",
    "ETCD_PEER",
    "APISERVER",
    "CONTROLLER_MANAGER",
    "SCHEDULER",
    "KUEUE_WEBHOOK",
    "KUEUE_HEALTH",
    "KUEUE_METRICS",
    "KWOK",
    "WORKER",
    "NFD",
)

NODE_PORTS = 3  # a real kubelet node takes three: kubelet, its healthz, the device manager

RANGES: dict[str, Range] = {
    # make dev (tests/cluster/lib.sh, dev.py) and the benchmarks' own clusters.
    "dev-control-plane": Range(27641, 27651, "make dev: etcd .. nfd-master, in CONTROL_PLANE order"),
    "dev-host": Range(27655, 27659, "make dev: the process node's Service stand-in and its Pods' ports"),
    "dev-nodes": Range(27661, 27669, "make dev: real kubelet nodes, three ports per slot (3 slots)"),
    "dev-hub": Range(27670, 27670, "make dev: the local model hub"),
    "dev-dashboard": Range(27671, 27671, "make dev: the worker-gateway's fleet dashboard"),
    "dev-store": Range(27680, 27683, "make dev: the Mooncake master and member"),
    "dev-kwok-dm": Range(27700, 27739, "make dev and benchmarks: publish-only device managers of kwok nodes"),
    # The e2e lane (tests/e2e/conftest.py exports these).
    "e2e-host": Range(27745, 27750, "e2e: the process node's Service stand-in and its Pods' ports"),
    "e2e-control-plane": Range(27751, 27761, "e2e: etcd .. nfd-master, in CONTROL_PLANE order"),
    "e2e-nodes": Range(27762, 27857, "e2e: real kubelet nodes, three ports per slot (32 slots)"),
    "e2e-kwok-dm": Range(27862, 27893, "e2e: publish-only device managers of kwok nodes, one per slot"),
    "e2e-second-cluster": Range(27900, 27910, "e2e: the gateway test's second control plane"),
    "e2e-store": Range(27920, 27939, "e2e: Mooncake stores of the KV cache and deployment modules"),
    # The second e2e lane (GPUSTACK_E2E_SHARD=1): its own control plane and everything around it.
    "e2e1-host": Range(28060, 28065, "e2e lane 2: the process node's Service stand-in and its Pods' ports"),
    "e2e1-control-plane": Range(28066, 28076, "e2e lane 2: etcd .. nfd-master, in CONTROL_PLANE order"),
    "e2e1-nodes": Range(28077, 28172, "e2e lane 2: real kubelet nodes, three ports per slot (32 slots)"),
    "e2e1-kwok-dm": Range(28173, 28204, "e2e lane 2: publish-only device managers of kwok nodes"),
    "e2e1-second-cluster": Range(28205, 28215, "e2e lane 2: the gateway test's second control plane"),
    "e2e1-store": Range(28216, 28235, "e2e lane 2: Mooncake stores"),
    # The third e2e lane (GPUSTACK_E2E_SHARD=2).
    "e2e2-host": Range(28240, 28245, "e2e lane 3: the process node's Service stand-in and its Pods' ports"),
    "e2e2-control-plane": Range(28246, 28256, "e2e lane 3: etcd .. nfd-master, in CONTROL_PLANE order"),
    "e2e2-nodes": Range(28257, 28352, "e2e lane 3: real kubelet nodes, three ports per slot (32 slots)"),
    "e2e2-kwok-dm": Range(28353, 28384, "e2e lane 3: publish-only device managers of kwok nodes"),
    "e2e2-second-cluster": Range(28385, 28395, "e2e lane 3: the gateway test's second control plane"),
    "e2e2-store": Range(28396, 28415, "e2e lane 3: Mooncake stores"),
    # The parallel lane.
    "store-tests": Range(27950, 28049, "tests/mooncake: masters, members, an etcd; 50 per xdist worker"),
    "bench-store": Range(28050, 28053, "loadtests/bench_kvcache: its master and member"),
    "bench-worker": Range(28055, 28056, "make bench and make locust: the worker they drive"),
}


def block(name: str) -> dict[str, int]:
    """A control plane block as ``{"ETCD": port, ...}``."""
    first = RANGES[name].first
    ports = {component: first + i for i, component in enumerate(CONTROL_PLANE)}
    assert ports["NFD"] == RANGES[name].last, name
    return ports


def port(name: str, offset: int = 0) -> int:
    return RANGES[name].port(offset)


E2E_LANES = 3  # the e2e lanes this table has ports for (scripts/test.sh runs at most as many)


def e2e_prefix(shard: int | None = None) -> str:
    """The e2e lane's range names: ``e2e-*`` for the first lane, ``e2e1-*`` for the second,
    ``e2e2-*`` for the third (``GPUSTACK_E2E_SHARD``, set by scripts/test.sh)."""
    if shard is None:
        shard = int(os.environ.get("GPUSTACK_E2E_SHARD", "0") or 0)
    if not 0 <= shard < E2E_LANES:
        raise ValueError(f"GPUSTACK_E2E_SHARD={shard}: this table has ports for e2e lanes 0-{E2E_LANES - 1}")
    return "e2e" if shard == 0 else f"e2e{shard}"


def node_ranges() -> list[str]:
    """Every range of real kubelet node slots: ``make dev``'s, then each e2e lane's."""
    return ["dev-nodes", *(f"{e2e_prefix(shard)}-nodes" for shard in range(E2E_LANES))]


def e2e(kind: str, offset: int = 0) -> int:
    """A port of this e2e lane: ``e2e("store")``, ``e2e("host", 1)``."""
    return port(f"{e2e_prefix()}-{kind}", offset)


def e2e_block(kind: str = "control-plane") -> dict[str, int]:
    return block(f"{e2e_prefix()}-{kind}")


def overlaps() -> list[tuple[str, str]]:
    """Pairs of ranges that share a port (none, asserted by the unit test)."""
    items = sorted(RANGES.items(), key=lambda kv: kv[1].first)
    return [
        (a, b)
        for i, (a, ra) in enumerate(items)
        for b, rb in items[i + 1 :]
        if ra.first <= rb.last and rb.first <= ra.last
    ]
