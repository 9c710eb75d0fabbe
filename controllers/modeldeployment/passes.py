"""One pass over a deployment, purely: its roles rendered, the planner's inputs stamped from them
(lazily, each Pod once), the plan under the holds the features put on it, and the status inputs the
pass reports.  The reconciler gathers the objects and sends the writes; everything between is
here."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from api import constants
from api.objects import Obj
from controllers.modeldeployment import names, services
from controllers.modeldeployment import plan as planner
from controllers.modeldeployment import status as st
from controllers.modeldeployment.extensions import Condition
from controllers.modeldeployment.render import Context, RenderError, RoleTemplate, render_role, stamp
from readmodels.modeldeployment import Deployment


@dataclass
class Pass:
    """What one pass rendered, saw and planned."""

    obj: Obj
    ctx: Context
    templates: dict[str, RoleTemplate]
    errors: list[RenderError]
    pods: list[Obj]
    result: planner.Plan
    held_by_cache: bool
    held_by_weights: bool

    @property
    def md(self) -> Deployment:
        return self.ctx.md


def render_roles(ctx: Context) -> tuple[dict[str, RoleTemplate], list[RenderError]]:
    """Every role's template; a role that fails to render is an error, not a template."""
    templates: dict[str, RoleTemplate] = {}
    errors: list[RenderError] = []
    for role in ctx.md.roles:
        try:
            templates[role.name] = render_role(ctx, role)
        except RenderError as error:
            errors.append(error)
    return templates, errors


def role_inputs(ctx: Context, templates: dict[str, RoleTemplate]) -> list[planner.RoleInput]:
    md = ctx.md
    out = []
    for role in md.roles:
        template = templates.get(role.name)
        memo: dict[tuple[int, int], Obj] = {}

        def stamped(ordinal: int, member: int, _t=template, _m=memo) -> Obj:
            pod = _m.get((ordinal, member))
            if pod is None:
                pod = _m[(ordinal, member)] = stamp(ctx, _t, ordinal, member)
            return pod

        def expected(ordinal: int, member: int, _s=stamped) -> str:
            return _s(ordinal, member)["metadata"]["annotations"][constants.ANNOTATION_POD_SPEC_HASH]

        out.append(
            planner.RoleInput(
                name=role.name,
                desired=max(role.replicas, 0),
                size=max(role.size, 1),
                stamp=stamped if template is not None else None,
                expected=expected if template is not None else None,
                group_name=partial(names.pod_group_name, md.namespace, md.name, role.name),
            )
        )
    return out


def plan_pass(
    obj: Obj,
    ctx: Context,
    templates: dict[str, RoleTemplate],
    errors: list[RenderError],
    pods: list[Obj],
    workloads: list[Obj],
) -> Pass:
    """The plan: rollouts held while the cache is unresolved or the weights are held, and no Pod
    created while the weights cannot be delivered."""
    cache, delivery = ctx.cache_resolution, ctx.delivery_resolution
    held_by_cache = bool(cache and cache.applicable and not cache.resolved)
    held_by_weights = bool(delivery and delivery.held)
    result = planner.plan(
        role_inputs(ctx, templates),
        pods,
        workloads,
        hold=held_by_cache or held_by_weights,
        create=not (delivery and delivery.blocked),
    )
    return Pass(obj, ctx, templates, errors, pods, result, held_by_cache, held_by_weights)


def status_inputs(p: Pass, feature: list[Condition], router: st.RouterState) -> st.Inputs:
    md, cache, delivery = p.md, p.ctx.cache_resolution, p.ctx.delivery_resolution
    first = p.templates.get(md.roles[0].name) if md.roles else None
    return st.Inputs(
        md=md,
        generation=int(p.obj["metadata"].get("generation") or 0),
        accounts=p.result.accounts,
        endpoint=services.endpoint(md, first.serving) if first is not None else None,
        render_error="; ".join(e.message for e in p.errors) or None,
        held_by_cache=p.held_by_cache,
        held_by_weights=p.held_by_weights,
        weights_blocked=delivery.blocked_message if delivery and delivery.blocked else None,
        publishing={name: t.publishes_kv_events for name, t in p.templates.items()},
        feature_conditions=feature,
        kv_cache=cache.status if cache else None,
        model=delivery.status if delivery else None,
        router=router,
    )
