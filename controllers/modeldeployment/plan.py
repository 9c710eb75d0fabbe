"""What one pass does to a deployment's replicas, purely (model-deployment.md §9.2–§9.4, §12.12).

Per role, with desired ordinals ``0..replicas-1``:

- an ordinal with no Pod on the API server is created on the pass that sees it, all members at once;
- ordinals at or above ``replicas`` are removed, highest first, Pods **and** Workload (that releases
  Kueue's finalizer and the quota);
- a replica with a member missing, leaving or failed is replaced whole: its remaining Pods and its
  Workload are deleted, and it is recreated once the ordinal reads empty (under new names);
- a complete replica whose ``pod-spec-hash`` differs from the render is outdated: at most one per role
  per pass is deleted, and only when every declared replica of the role holds an admitted Workload,
  and not while the cache connection or the weights hold rollouts back;
- a Pod that is merely not Ready (its node NotReady but registered) keeps its ordinal and is never
  replaced.  Deletes use the default grace, never zero;
- while the weights cannot be delivered (``create=False``: the artifact is missing or unresolved, a
  claim is unbound, ...) no Pod is created at all — no new replica, replacement or scale-up — and
  what runs keeps running (model-delivery §3.4.1, §4.1 item 9).

The plan also accounts, per role, for what the status reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.objects import Obj
from controllers.modeldeployment import replicas as rp
from controllers.modeldeployment.labels import live_hash

Stamper = Callable[[int, int], Obj]
"""``stamp(ordinal, member)``: a rendered Pod of the role."""
HashOf = Callable[[int, int], str]
"""``expected(ordinal, member)``: the hash the render gives that Pod."""


@dataclass
class RoleInput:
    name: str
    desired: int
    size: int
    stamp: Stamper | None  # None when the role could not be rendered this pass
    expected: HashOf | None
    group_name: Callable[[int], str]


@dataclass
class RoleAccount:
    """What the pass saw of one role."""

    name: str
    desired: int
    ready: int = 0
    quota_reserved: int = 0
    present: int = 0  # replicas with every member present and none leaving
    incomplete: int = 0  # desired ordinals with some but not all members, or leaving members
    missing: int = 0  # desired ordinals with no Pod at all
    outdated: int = 0  # replicas whose hash the pass read and found different (leaving ones too)
    vouched: int = 0  # replicas whose hash the pass read or that it created from its render
    leaving_only: int = 0  # replicas every Pod of which is leaving
    rolled: bool = False
    held: int = 0  # outdated replicas left in place by a hold
    without_workload: int = 0  # complete replicas Kueue has not composed a Workload for yet
    parked: int = 0
    preempted: int = 0
    admitted: int = 0
    flavors: set[str] = field(default_factory=set)
    workloads: list[Obj] = field(default_factory=list)


@dataclass
class Plan:
    creates: list[Obj] = field(default_factory=list)
    pod_deletes: list[Obj] = field(default_factory=list)
    workload_deletes: list[Obj] = field(default_factory=list)
    accounts: dict[str, RoleAccount] = field(default_factory=dict)
    replicas: dict[tuple[str, int], rp.Replica] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        return len(self.creates) + len(self.pod_deletes) + len(self.workload_deletes)


NON_ACCELERATOR = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def assigned_flavors(workload: Mapping[str, Any] | None) -> set[str]:
    """Flavors of the accelerator credits (not cpu/memory) in a Workload's admission."""
    out: set[str] = set()
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or ():
        for resource, flavor in (assignment.get("flavors") or {}).items():
            if resource not in NON_ACCELERATOR and isinstance(flavor, str):
                out.add(flavor)
    return out


def _remove(plan: Plan, replica: rp.Replica) -> None:
    for pod in replica.pods:
        if not rp.leaving(pod):
            plan.pod_deletes.append(pod)
    if replica.workload is not None and not rp.leaving(replica.workload):
        plan.workload_deletes.append(replica.workload)


def _outdated(replica: rp.Replica, expected: HashOf) -> bool:
    for pod in replica.pods:
        member = rp.member_of(pod)
        if member is None or live_hash(pod) != expected(replica.ordinal, member):
            return True
    return False


def _account_workload(account: RoleAccount, replica: rp.Replica) -> None:
    wl = replica.workload
    if wl is None or rp.leaving(wl):
        return
    account.workloads.append(wl)
    if rp.quota_reserved(wl):
        account.quota_reserved += 1
        account.flavors |= assigned_flavors(wl)
    if rp.admitted(wl):
        account.admitted += 1
    if rp.parked(wl):
        account.parked += 1
    if rp.preempted(wl):
        account.preempted += 1


def plan_role(
    plan: Plan,
    role: RoleInput,
    live: Mapping[int, rp.Replica],
    workloads_by_name: Mapping[str, Obj],
    *,
    hold: bool,
    create: bool = True,
) -> None:
    account = RoleAccount(role.name, role.desired)
    plan.accounts[role.name] = account
    for ordinal in sorted((k for k in live if k >= role.desired), reverse=True):
        _remove(plan, live[ordinal])  # scale-down: highest ordinals first
    outdated: list[rp.Replica] = []
    for ordinal in range(role.desired):
        replica = live.get(ordinal)
        if replica is None or not replica.pods:
            account.missing += 1
            lingering = workloads_by_name.get(role.group_name(ordinal))
            if lingering is not None and not rp.leaving(lingering):
                plan.workload_deletes.append(lingering)  # it would hold the slot the new group needs
            elif role.stamp is not None and create:
                plan.creates += [role.stamp(ordinal, m) for m in range(role.size)]
                account.vouched += 1
            continue
        _account_workload(account, replica)
        state = replica.state
        stale = role.expected is not None and _outdated(replica, role.expected)
        if role.stamp is not None:
            account.vouched += 1
        if state == rp.BROKEN:
            account.incomplete += 1
            if all(rp.leaving(p) for p in replica.pods):
                account.leaving_only += 1
            if stale:
                account.outdated += 1
            _remove(plan, replica)
            continue
        account.present += 1
        if replica.ready:
            account.ready += 1
        if replica.workload is None:
            account.without_workload += 1
        if stale:
            account.outdated += 1
            outdated.append(replica)
    if not outdated:
        return
    if hold:
        account.held = len(outdated)
        return
    every_admitted = all(
        (r := live.get(k)) is not None and r.state == rp.COMPLETE and rp.admitted(r.workload)
        for k in range(role.desired)
    )
    if every_admitted:
        _remove(plan, outdated[0])
        account.rolled = True


def plan(
    roles: list[RoleInput],
    pods: list[Obj],
    workloads: list[Obj],
    *,
    hold: bool = False,
    create: bool = True,
) -> Plan:
    """The pass's writes and accounts.  ``pods`` are the deployment's live Pods (listed on the API
    server), ``workloads`` its namespace's Workloads; ``create=False`` creates no Pod."""
    out = Plan()
    sizes = {r.name: r.size for r in roles}
    replicas, stray = rp.group(pods, workloads, sizes)
    out.replicas = replicas
    for pod in stray:
        if not rp.leaving(pod):
            out.pod_deletes.append(pod)
    by_name, _ = rp.workload_index(workloads)
    for role in roles:
        live = {k: r for (name, k), r in replicas.items() if name == role.name}
        plan_role(out, role, live, by_name, hold=hold, create=create)
    return out
