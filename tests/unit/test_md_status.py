"""controllers.modeldeployment.status: phase, roles and every condition of model-deployment.md §10."""

from __future__ import annotations

from api import model_deployment_status as s
from controllers.modeldeployment.plan import RoleAccount
from controllers.modeldeployment.status import Inputs, RouterState, conditions, render_status, role_summary
from readmodels.modeldeployment import Deployment
from tests.unit.md_fixtures import deployment, pair, role


def account(name, desired, **kw):
    a = RoleAccount(name, desired)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def cond(inputs, kind):
    return next(c for c in conditions(inputs) if c.type == kind)


def healthy(name, n):
    return account(name, n, ready=n, quota_reserved=n, present=n, admitted=n, vouched=n)


def test_ready_deployment() -> None:
    md = Deployment(deployment(role(replicas=2)))
    inputs = Inputs(md, 1, {"server": healthy("server", 2)}, "http://qwen.team-a.svc:8000")
    status = render_status(inputs, None, "2025-01-01T00:00:00Z")
    assert status["phase"] == s.PHASE_READY
    assert status["endpoint"] == "http://qwen.team-a.svc:8000"
    assert status["roles"] == [
        {"name": "server", "kind": "Server", "desired": 2, "ready": 2, "quotaReserved": 2, "unmanaged": False}
    ]
    assert status["roleSummary"] == "2S"
    by_type = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert by_type[s.CONDITION_QUOTA_RESERVED] == ("True", s.REASON_RESERVED)
    assert by_type[s.CONDITION_REPLICAS_UP_TO_DATE] == ("True", s.REASON_UP_TO_DATE)
    assert by_type[s.CONDITION_ROLE_KINDS_READY] == ("True", s.REASON_ALL_KINDS_READY)
    assert by_type[s.CONDITION_KV_EVENTS_PUBLISHING] == ("True", s.REASON_NOT_APPLICABLE)
    assert by_type[s.CONDITION_ROUTER_READY] == ("True", s.REASON_NOT_APPLICABLE)
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])


def test_phases_starting_and_degraded() -> None:
    md = Deployment(deployment(role(replicas=2)))
    starting = Inputs(md, 1, {"server": account("server", 2)}, None)
    assert render_status(starting, None, "t")["phase"] == s.PHASE_STARTING
    half = Inputs(md, 1, {"server": account("server", 2, ready=1, present=2)}, None)
    assert render_status(half, None, "t")["phase"] == s.PHASE_DEGRADED


def test_quota_reserved_reasons() -> None:
    md = Deployment(pair())
    none = Inputs(md, 1, {"prefill": account("prefill", 2), "decode": account("decode", 2)}, None)
    assert cond(none, s.CONDITION_QUOTA_RESERVED).reason == s.REASON_NO_REPLICAS
    leaving = Inputs(md, 1, {"prefill": account("prefill", 2, incomplete=1, leaving_only=1)}, None)
    assert cond(leaving, s.CONDITION_QUOTA_RESERVED).reason == s.REASON_ALL_REPLICAS_TERMINATING
    short = Inputs(
        md, 1, {"prefill": healthy("prefill", 2), "decode": account("decode", 2, present=1, missing=1)}, None
    )
    got = cond(short, s.CONDITION_QUOTA_RESERVED)
    assert (got.status, got.reason) == (
        "False",
        s.REASON_POD_GROUP_INCOMPLETE,
    ) and "decode 1/2" in got.message
    in_flight = Inputs(
        md,
        1,
        {"prefill": healthy("prefill", 2), "decode": account("decode", 2, present=2, without_workload=1)},
        None,
    )
    assert cond(in_flight, s.CONDITION_QUOTA_RESERVED).status == "Unknown"
    pending = Inputs(
        md,
        1,
        {"prefill": healthy("prefill", 2), "decode": account("decode", 2, present=2, quota_reserved=1)},
        None,
    )
    got = cond(pending, s.CONDITION_QUOTA_RESERVED)
    assert got.reason == s.REASON_PENDING and "decode" in got.message and "prefill" not in got.message
    parked = Inputs(md, 1, {"prefill": account("prefill", 2, present=2, parked=2)}, None)
    assert cond(parked, s.CONDITION_QUOTA_RESERVED).reason == s.REASON_PARKED
    preempted = Inputs(
        md,
        1,
        {"prefill": healthy("prefill", 2), "decode": account("decode", 2, present=2, preempted=2)},
        None,
    )
    got = cond(preempted, s.CONDITION_QUOTA_RESERVED)
    assert got.reason == s.REASON_PREEMPTED_IN_PART and "Decode" in got.message
    reserved_ns = Deployment({**deployment(), "metadata": {"name": "x", "namespace": "kube-system"}})
    inputs = Inputs(reserved_ns, 1, {"server": account("server", 1)}, None)
    assert cond(inputs, s.CONDITION_QUOTA_RESERVED).reason == s.REASON_NO_QUEUE_IN_RESERVED_NAMESPACE


def test_replicas_up_to_date_never_a_stale_true() -> None:
    md = Deployment(deployment(role(replicas=2)))
    nothing = Inputs(md, 1, {"server": account("server", 2)}, None)
    assert cond(nothing, s.CONDITION_REPLICAS_UP_TO_DATE).status == "Unknown"
    rolling = Inputs(md, 1, {"server": account("server", 2, present=2, vouched=2, outdated=1)}, None)
    assert cond(rolling, s.CONDITION_REPLICAS_UP_TO_DATE).reason == s.REASON_ROLLOUT_IN_PROGRESS
    replacing = Inputs(md, 1, {"server": account("server", 2, present=1, vouched=1, missing=1)}, None)
    assert cond(replacing, s.CONDITION_REPLICAS_UP_TO_DATE).reason == s.REASON_REPLACEMENT_IN_PROGRESS
    held = Inputs(
        md,
        1,
        {"server": account("server", 2, present=2, vouched=2, outdated=2, held=2)},
        None,
        held_by_cache=True,
    )
    assert cond(held, s.CONDITION_REPLICAS_UP_TO_DATE).reason == s.REASON_ROLLOUT_HELD_BY_CACHE
    failed = Inputs(md, 1, {"server": healthy("server", 2)}, None, render_error="no image")
    got = cond(failed, s.CONDITION_REPLICAS_UP_TO_DATE)
    assert (got.status, got.reason) == (
        "Unknown",
        s.REASON_ROLLOUT_NOT_OBSERVED,
    ) and "no image" in got.message


def test_role_kinds_and_summary() -> None:
    md = Deployment(pair(router={"name": "llm-d-router"}))
    inputs = Inputs(
        md,
        1,
        {"prefill": healthy("prefill", 2), "decode": account("decode", 2)},
        None,
        router=RouterState(declared=True, ready_replicas=1),
    )
    got = cond(inputs, s.CONDITION_ROLE_KINDS_READY)
    assert (got.status, got.reason) == ("False", s.REASON_KINDS_NOT_READY) and "Decode" in got.message
    assert role_summary(inputs) == "1R2P0D"
    assert cond(Inputs(md, 1, {}, None), s.CONDITION_ROLE_KINDS_READY).reason == s.REASON_NO_ROLE_STATUSES


def test_kv_events_publishing() -> None:
    unrouted_pair = Inputs(Deployment(pair()), 1, {}, None)
    assert cond(unrouted_pair, s.CONDITION_KV_EVENTS_PUBLISHING).reason == s.REASON_NO_ROUTER
    routed = Inputs(
        Deployment(pair(router={"name": "llm-d-router"})), 1, {}, None, publishing={"prefill": True}
    )
    assert cond(routed, s.CONDITION_KV_EVENTS_PUBLISHING).reason == s.REASON_PUBLISHING
    sglang = pair(router={"name": "sglang-gateway"})
    sglang["spec"]["engine"]["name"] = "SGLang"
    disabled = Inputs(Deployment(sglang), 1, {}, None, publishing={"prefill": False})
    assert cond(disabled, s.CONDITION_KV_EVENTS_PUBLISHING).reason == s.REASON_PUBLISHER_DISABLED
    take_over = pair(router={"name": "llm-d-router"})
    take_over["spec"]["roles"][0]["command"] = ["x"]
    unmanaged = Inputs(Deployment(take_over), 1, {}, None)
    assert cond(unmanaged, s.CONDITION_KV_EVENTS_PUBLISHING).reason == s.REASON_ROLE_UNMANAGED


def test_router_conditions_and_endpoint() -> None:
    md = Deployment(pair(router={"name": "llm-d-router"}))
    accounts = {"prefill": healthy("prefill", 2), "decode": healthy("decode", 2)}
    absent = Inputs(md, 1, accounts, "http://x", router=RouterState(declared=True))
    status = render_status(absent, None, "t")
    assert "endpoint" not in status and status["phase"] == s.PHASE_DEGRADED
    assert cond(absent, s.CONDITION_ROUTER_READY).reason == s.REASON_NOT_DEPLOYED
    ready = Inputs(
        md, 1, accounts, "http://x", router=RouterState(True, True, 1, "http://qwen-router.team-a.svc:80")
    )
    status = render_status(ready, None, "t")
    assert status["endpoint"] == "http://qwen-router.team-a.svc:80" and status["phase"] == s.PHASE_READY


def test_transition_times_hold_while_status_holds() -> None:
    md = Deployment(deployment())
    inputs = Inputs(md, 1, {"server": healthy("server", 1)}, None)
    first = render_status(inputs, None, "2025-01-01T00:00:00Z")
    again = render_status(inputs, first, "2025-01-02T00:00:00Z")
    assert again == first
    worse = Inputs(md, 2, {"server": account("server", 1, present=1, vouched=1)}, None)
    moved = render_status(worse, first, "2025-01-03T00:00:00Z")
    kinds = {c["type"]: c for c in moved["conditions"]}
    assert kinds[s.CONDITION_ROLE_KINDS_READY]["lastTransitionTime"] == "2025-01-03T00:00:00Z"
    assert kinds[s.CONDITION_REPLICAS_UP_TO_DATE]["lastTransitionTime"] == "2025-01-01T00:00:00Z"


def test_ready_condition_repeats_the_phase_and_comes_first() -> None:
    md = Deployment(deployment(role(replicas=2)))
    ready = render_status(Inputs(md, 1, {"server": healthy("server", 2)}, None), None, "t")
    first = ready["conditions"][0]
    assert (first["type"], first["status"], first["reason"]) == (s.CONDITION_READY, "True", s.PHASE_READY)
    assert first["message"] == ready["phaseMessage"]
    for inputs, phase in (
        (Inputs(md, 1, {"server": account("server", 2)}, None), s.PHASE_STARTING),
        (Inputs(md, 1, {"server": account("server", 2, ready=1, present=2)}, None), s.PHASE_DEGRADED),
        (Inputs(md, 1, {"server": healthy("server", 2)}, None, deleting=True), s.PHASE_DELETING),
    ):
        status = render_status(inputs, None, "t")
        said = cond(inputs, s.CONDITION_READY)
        assert status["phase"] == phase
        assert (said.status, said.reason, said.message) == ("False", phase, status["phaseMessage"])


def test_ready_transition_time_moves_only_when_ready_flips() -> None:
    md = Deployment(deployment(role(replicas=2)))
    starting = Inputs(md, 1, {"server": account("server", 2)}, None)
    degraded = Inputs(md, 1, {"server": account("server", 2, ready=1, present=2)}, None)
    ready = Inputs(md, 1, {"server": healthy("server", 2)}, None)

    def since(status):
        return next(c for c in status["conditions"] if c["type"] == s.CONDITION_READY)["lastTransitionTime"]

    a = render_status(starting, None, "2025-01-01T00:00:00Z")
    b = render_status(degraded, a, "2025-01-02T00:00:00Z")  # still False: the time holds
    assert since(b) == "2025-01-01T00:00:00Z"
    c = render_status(ready, b, "2025-01-03T00:00:00Z")  # flips to True
    assert since(c) == "2025-01-03T00:00:00Z"
    assert render_status(ready, c, "2025-01-04T00:00:00Z") == c  # a converged resync writes nothing new
