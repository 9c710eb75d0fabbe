"""A ModelDeployment's status, purely (model-deployment.md §10).

Computed from one pass's accounts (Pods and Workloads listed successfully — a failed list writes
nothing), the rendered serving facts, and the features' resolutions.  Counts are observed zeros;
``status.kvCache`` and ``status.router`` are absent, not empty, while unresolved; ``ReplicasUpToDate``
falls to ``Unknown`` when the pass vouched for no replica instead of keeping a stale ``True``.
Conditions keep their ``lastTransitionTime`` while their status holds; ``Ready`` (first) repeats the
phase, so ``kubectl wait --for=condition=Ready`` works.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import engines
from api import model_deployment_status as s
from api.objects import Obj
from controllers.modeldeployment.extensions import Condition
from controllers.modeldeployment.plan import RoleAccount
from controllers.ready import verdict
from readmodels.modeldeployment import DECODE, PREFILL, SERVER, Deployment

KIND_LETTERS = {SERVER: "S", PREFILL: "P", DECODE: "D"}
RESERVED_NAMESPACES = frozenset(
    ("kube-system", "kube-public", "kube-node-lease", "gpustack-system", "kueue-system")
)
"""Namespaces that carry no LocalQueue (the pool controllers skip them)."""


@dataclass
class RouterState:
    """What the pass knows of the managed router."""

    declared: bool = False
    deployed: bool = False
    ready_replicas: int = 0
    endpoint: str | None = None
    render_error: str | None = None
    status: Obj | None = None


@dataclass
class Inputs:
    md: Deployment
    generation: int
    accounts: Mapping[str, RoleAccount]
    endpoint: str | None
    render_error: str | None = None
    deleting: bool = False
    held_by_cache: bool = False
    held_by_weights: bool = False
    weights_blocked: str | None = None  # no Pod is created, and why (the phase message says so)
    publishing: Mapping[str, bool] = field(default_factory=dict)  # role -> rendered publisher
    feature_conditions: list[Condition] = field(default_factory=list)
    kv_cache: Obj | None = None
    model: Obj | None = None
    router: RouterState = field(default_factory=RouterState)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def quota_reserved(inputs: Inputs) -> Condition:
    md, accounts = inputs.md, inputs.accounts
    kind = s.CONDITION_QUOTA_RESERVED
    if md.namespace in RESERVED_NAMESPACES:
        return Condition(
            kind,
            "False",
            s.REASON_NO_QUEUE_IN_RESERVED_NAMESPACE,
            f"namespace {md.namespace} is reserved and has no LocalQueue: deploy in a tenant namespace",
        )
    live = sum(a.present + a.incomplete for a in accounts.values())
    if live == 0:
        return Condition(kind, "Unknown", s.REASON_NO_REPLICAS, "no replica has been created yet")
    if live == sum(a.leaving_only for a in accounts.values()):
        return Condition(kind, "Unknown", s.REASON_ALL_REPLICAS_TERMINATING, "every replica is leaving")
    types = {r.name: r.instance_type for r in md.roles}
    parked = [a.name for a in accounts.values() if a.parked]
    if parked:
        return Condition(
            kind,
            "False",
            s.REASON_PARKED,
            f"the joint admission check deactivated the Workloads of role(s) {', '.join(parked)}; "
            "an identical re-apply does not clear it",
        )
    preempted = [a for a in accounts.values() if a.preempted]
    if preempted and any(a.admitted for a in accounts.values()):
        lost = [r.kind for r in md.roles if not accounts.get(r.name, RoleAccount(r.name, 0)).admitted]
        scope = (
            f"no {', '.join(sorted(set(lost)))} replica is admitted any more: a whole role kind is lost"
            if lost
            else "every role kind keeps an admitted replica"
        )
        names = ", ".join(f"{a.name} ({a.preempted})" for a in preempted)
        return Condition(kind, "False", s.REASON_PREEMPTED_IN_PART, f"preempted replicas: {names}; {scope}")
    short = [a for a in accounts.values() if a.present < a.desired and a.missing + a.incomplete]
    if short:
        parts = [f"{a.name} {a.present}/{a.desired} in queue {types.get(a.name, '')}" for a in short]
        return Condition(
            kind, "False", s.REASON_POD_GROUP_INCOMPLETE, "replicas present: " + "; ".join(parts)
        )
    in_flight = [a.name for a in accounts.values() if a.without_workload]
    if in_flight:
        return Condition(
            kind,
            "Unknown",
            s.REASON_ADMISSION_IN_FLIGHT,
            f"Kueue has not composed the Workload of complete replicas of role(s) {', '.join(in_flight)} yet",
        )
    waiting = [a for a in accounts.values() if a.quota_reserved < a.desired]
    if waiting:
        parts = [
            f"{_plural(a.desired - a.quota_reserved, 'replica')} of role {a.name} in queue {types.get(a.name, '')}"
            for a in waiting
        ]
        return Condition(kind, "False", s.REASON_PENDING, "waiting for quota: " + "; ".join(parts))
    message = "every replica holds a quota reservation"
    if len(md.roles) == 1:
        message += f" in cluster queue {md.roles[0].instance_type}"
    return Condition(kind, "True", s.REASON_RESERVED, message)


def replicas_up_to_date(inputs: Inputs) -> Condition:
    kind = s.CONDITION_REPLICAS_UP_TO_DATE
    accounts = inputs.accounts.values()
    if inputs.render_error:
        return Condition(
            kind, "Unknown", s.REASON_ROLLOUT_NOT_OBSERVED, f"render failed: {inputs.render_error}"
        )
    if not any(a.vouched for a in accounts):
        return Condition(kind, "Unknown", s.REASON_ROLLOUT_NOT_OBSERVED, "the pass accounted for no replica")
    held = [a for a in accounts if a.held]
    if held:
        reason = s.REASON_ROLLOUT_HELD_BY_CACHE if inputs.held_by_cache else s.REASON_ROLLOUT_HELD_BY_WEIGHTS
        cause = "no cache connection resolved" if inputs.held_by_cache else "the model weights are blocked"
        parts = ", ".join(f"{a.name} ({a.held})" for a in held)
        return Condition(
            kind,
            "False",
            reason,
            f"replicas that differ from the render are left in place ({cause}): {parts}",
        )
    outdated = [a for a in accounts if a.outdated]
    if outdated:
        parts = ", ".join(f"{a.name} ({a.outdated} of {a.desired})" for a in outdated)
        return Condition(
            kind,
            "False",
            s.REASON_ROLLOUT_IN_PROGRESS,
            f"replicas differ from the render and turn over one per role per pass: {parts}",
        )
    short = [a for a in accounts if a.present < a.desired]
    if short:
        parts = ", ".join(f"{a.name} {a.present}/{a.desired}" for a in short)
        return Condition(
            kind,
            "False",
            s.REASON_REPLACEMENT_IN_PROGRESS,
            f"every surviving replica matches the render but the declared count is short: {parts}",
        )
    return Condition(kind, "True", s.REASON_UP_TO_DATE, "every replica matches the render")


def role_kinds_ready(inputs: Inputs) -> Condition:
    kind = s.CONDITION_ROLE_KINDS_READY
    if not inputs.accounts:
        return Condition(kind, "Unknown", s.REASON_NO_ROLE_STATUSES, "no role was accounted for")
    ready: dict[str, int] = {}
    for role in inputs.md.roles:
        account = inputs.accounts.get(role.name)
        ready[role.kind] = ready.get(role.kind, 0) + (account.ready if account else 0)
    missing = sorted(k for k, n in ready.items() if n == 0)
    if missing:
        return Condition(
            kind, "False", s.REASON_KINDS_NOT_READY, f"no ready replica of kind {', '.join(missing)}"
        )
    return Condition(kind, "True", s.REASON_ALL_KINDS_READY, "every role kind has a ready replica")


def kv_events_publishing(inputs: Inputs) -> Condition:
    md = inputs.md
    kind = s.CONDITION_KV_EVENTS_PUBLISHING
    producers = [r for r in md.roles if r.kind != DECODE]
    if md.router is None:
        if md.pair:
            return Condition(
                kind, "False", s.REASON_NO_ROUTER, "a prefill/decode pair has no router to consume events"
            )
        return Condition(kind, "True", s.REASON_NOT_APPLICABLE, "an unrouted deployment")
    unmanaged = [r.name for r in producers if not r.managed]
    if unmanaged:
        return Condition(
            kind,
            "Unknown",
            s.REASON_ROLE_UNMANAGED,
            f"role(s) {', '.join(unmanaged)} took the command line over; what they publish is not known",
        )
    disabled = [r.name for r in producers if not inputs.publishing.get(r.name)]
    if disabled:
        why = (
            f"{md.engine} renders no publisher"
            if md.engine != engines.ENGINE_VLLM or md.router_name != engines.ROUTER_LLM_D
            else "the rendered Pods do not enable publishing"
        )
        return Condition(
            kind,
            "False",
            s.REASON_PUBLISHER_DISABLED,
            f"role(s) {', '.join(disabled)} produce blocks but {why} under {md.router_name}",
        )
    return Condition(kind, "True", s.REASON_PUBLISHING, "every producing role is configured to publish")


def router_ready(router: RouterState) -> Condition:
    kind = s.CONDITION_ROUTER_READY
    if not router.declared:
        return Condition(kind, "True", s.REASON_NOT_APPLICABLE, "no spec.router")
    if router.render_error:
        return Condition(kind, "False", s.REASON_RENDER_FAILED, router.render_error)
    if not router.deployed:
        return Condition(kind, "Unknown", s.REASON_NOT_DEPLOYED, "the router's Deployment does not exist yet")
    if router.ready_replicas <= 0:
        return Condition(kind, "False", s.REASON_NO_READY_REPLICAS, "the router has no ready replica")
    return Condition(
        kind, "True", s.REASON_READY, f"{_plural(router.ready_replicas, 'router replica')} ready"
    )


def phase(inputs: Inputs) -> tuple[str, str]:
    if inputs.deleting:
        return s.PHASE_DELETING, "deleting the replicas, their Workloads and Services"
    accounts = inputs.accounts
    desired = sum(a.desired for a in accounts.values())
    ready = sum(min(a.ready, a.desired) for a in accounts.values())
    router = inputs.router
    router_ok = not router.declared or router.ready_replicas > 0
    suffix = f"; render failed: {inputs.render_error}" if inputs.render_error else ""
    if inputs.weights_blocked:
        suffix += f"; {inputs.weights_blocked}"
    if desired and ready == desired and router_ok and not inputs.render_error:
        return s.PHASE_READY, f"{_plural(ready, 'replica')} ready{suffix}"
    if ready == 0:
        return s.PHASE_STARTING, f"0/{desired} replicas ready{suffix}"
    missing = "" if router_ok else "; the router has no ready replica"
    return s.PHASE_DEGRADED, f"{ready}/{desired} replicas ready{missing}{suffix}"


def ready(inputs: Inputs) -> Condition:
    """The phase as the top-level ``Ready`` condition: True exactly in phase ``Ready``, the phase
    its reason and the phase message its message."""
    name, message = phase(inputs)
    said = verdict(name == s.PHASE_READY, name, message)
    return Condition(s.CONDITION_READY, said.status, said.reason, said.message)


def role_summary(inputs: Inputs) -> str:
    counts: dict[str, int] = {}
    for role in inputs.md.roles:
        account = inputs.accounts.get(role.name)
        letter = KIND_LETTERS.get(role.kind, "S")
        counts[letter] = counts.get(letter, 0) + (account.ready if account else 0)
    head = f"{inputs.router.ready_replicas}R" if inputs.router.declared else ""
    return head + "".join(f"{counts[k]}{k}" for k in ("S", "P", "D") if k in counts)


def _role_entries(inputs: Inputs) -> list[Obj]:
    out = []
    for role in inputs.md.roles:
        account = inputs.accounts.get(role.name) or RoleAccount(role.name, role.replicas)
        entry: Obj = {
            "name": role.name,
            "kind": role.kind,
            "desired": role.replicas,
            "ready": account.ready,
            "quotaReserved": account.quota_reserved,
            "unmanaged": not role.managed,
        }
        if account.flavors:
            entry["assignedFlavors"] = sorted(account.flavors)
        out.append(entry)
    return out


def conditions(inputs: Inputs) -> list[Condition]:
    out = list(inputs.feature_conditions)
    out += [
        ready(inputs),
        quota_reserved(inputs),
        replicas_up_to_date(inputs),
        role_kinds_ready(inputs),
        kv_events_publishing(inputs),
        router_ready(inputs.router),
    ]
    order = {name: i for i, name in enumerate(_ORDER)}
    return sorted(out, key=lambda cond: order.get(cond.type, len(order)))


_ORDER = (
    s.CONDITION_READY,
    s.CONDITION_DOMAIN_REGISTERED,
    s.CONDITION_QUOTA_RESERVED,
    s.CONDITION_CACHE_ATTACHED,
    s.CONDITION_REPLICAS_UP_TO_DATE,
    s.CONDITION_ROLE_KINDS_READY,
    s.CONDITION_KV_EVENTS_PUBLISHING,
    s.CONDITION_ROUTER_READY,
    s.CONDITION_WEIGHTS_READY,
)


def _stamped(
    conds: Iterable[Condition], current: Mapping[str, Any] | None, generation: int, now: str
) -> list[Obj]:
    before = {c.get("type"): c for c in (current or {}).get("conditions") or ()}
    out = []
    for cond in conds:
        old = before.get(cond.type) or {}
        out.append(
            {
                "type": cond.type,
                "status": cond.status,
                "reason": cond.reason,
                "message": cond.message[:1024],
                "lastTransitionTime": old.get("lastTransitionTime")
                if old.get("status") == cond.status and old.get("lastTransitionTime")
                else now,
                "observedGeneration": generation,
            }
        )
    return out


def render_status(inputs: Inputs, current: Mapping[str, Any] | None, now: str) -> Obj:
    """The whole status the pass writes."""
    name, message = phase(inputs)
    status: Obj = {"phase": name, "phaseMessage": message}
    status["conditions"] = _stamped(conditions(inputs), current, inputs.generation, now)
    endpoint = inputs.router.endpoint if inputs.router.declared else inputs.endpoint
    if inputs.router.declared and inputs.router.ready_replicas <= 0:
        endpoint = None
    if endpoint:
        status["endpoint"] = endpoint
    status["roles"] = _role_entries(inputs)
    if inputs.kv_cache is not None:
        status["kvCache"] = inputs.kv_cache
    if inputs.router.status is not None:
        status["router"] = inputs.router.status
    status["roleSummary"] = role_summary(inputs)
    if inputs.model is not None:
        status["model"] = inputs.model
    return status


def changed(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    return dict(current or {}) != dict(desired)
